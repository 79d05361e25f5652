// The AmoebaNet-D and -B genotypes, transcribed from the TensorFlow reference's model_specs.py
// (normal_concat / reduction_concat are the states its used_hiddenstates marks 0).
#include "gpipe/models/amoebanet_genotype.h"

#include <regex>

#include "gpipe/errors.h"

namespace gpipe::models {

OperationSpec parse_operation(const std::string& name) {
  OperationSpec spec;
  spec.name = name;
  std::smatch match;
  static const std::regex kPool("(max|avg)_pool_([0-9])x\\2");
  static const std::regex kSeparable("(dil_([0-9])_)?separable_([0-9])x\\3_([0-9])");
  if (name == "none") {
    spec.kind = OperationSpec::Kind::kIdentity;
  } else if (name == "1x1" || name == "3x3") {
    spec.kind = OperationSpec::Kind::kConv;
    spec.kernel = name == "1x1" ? 1 : 3;
  } else if (name == "1x7_7x1") {
    spec.kind = OperationSpec::Kind::kConv;
    spec.kernel = 7;
    spec.factorized = true;
  } else if (std::regex_match(name, match, kPool)) {
    spec.kind = match[1] == "max" ? OperationSpec::Kind::kMaxPool : OperationSpec::Kind::kAvgPool;
    spec.kernel = std::stoi(match[2]);
  } else if (std::regex_match(name, match, kSeparable)) {
    spec.kind = OperationSpec::Kind::kSeparable;
    spec.dilation = match[2].matched ? std::stoi(match[2]) : 1;
    spec.kernel = std::stoi(match[3]);
    spec.repeats = std::stoi(match[4]);
  } else {
    throw ConfigError("unknown AmoebaNet operation '" + name +
                      "'; known: none, 1x1, 3x3, 1x7_7x1, max_pool_KxK, avg_pool_KxK, "
                      "separable_KxK_N, dil_D_separable_KxK_N");
  }
  GPIPE_CHECK(spec.kernel >= 1 && spec.repeats >= 1 && spec.dilation >= 1, ConfigError,
              "AmoebaNet operation '", name, "' has a zero kernel, repeat count or dilation");
  return spec;
}

const Genotype& amoebanet_d_genotype() {
  static const Genotype genotype{"amoebanet-d",
                                 {{"1x1", "max_pool_3x3", "none", "1x7_7x1", "1x1", "1x7_7x1",
                                   "max_pool_3x3", "none", "avg_pool_3x3", "1x1"},
                                  {1, 1, 1, 0, 0, 0, 2, 2, 1, 5},
                                  {0, 3, 4, 6}},
                                 {{"max_pool_2x2", "max_pool_3x3", "none", "3x3", "1x7_7x1",
                                   "max_pool_3x3", "none", "max_pool_2x2", "avg_pool_3x3", "1x1"},
                                  {0, 0, 2, 1, 2, 2, 3, 1, 2, 3},
                                  {4, 5, 6}}};
  return genotype;
}

const Genotype& amoebanet_b_genotype() {
  static const Genotype genotype{
      "amoebanet-b",
      {{"1x1", "max_pool_3x3", "none", "separable_3x3_2", "1x1", "separable_3x3_2", "1x1", "none",
        "avg_pool_3x3", "1x1"},
       {1, 1, 1, 0, 1, 0, 2, 2, 1, 5},
       {0, 3, 4, 6}},
      {{"max_pool_2x2", "max_pool_3x3", "none", "3x3", "dil_2_separable_5x5_2", "max_pool_3x3",
        "none", "separable_3x3_2", "avg_pool_3x3", "1x1"},
       {0, 0, 2, 1, 2, 2, 3, 1, 4, 3},
       {5, 6}}};
  return genotype;
}

void validate_cell(const CellGenotype& cell, bool reduction, const std::string& what) {
  // reduced[s]: state s has the cell's output resolution (always true in a normal cell).
  std::vector<bool> reduced{!reduction, !reduction};
  for (int p = 0; p < kCellPairs; ++p) {
    bool pair_reduced[2];
    for (int side = 0; side < 2; ++side) {
      const int op = 2 * p + side;
      const auto spec = parse_operation(cell.operations[op]);
      const int input = cell.inputs[op];
      GPIPE_CHECK(input >= 0 && input < 2 + p, ConfigError, what, ": operation ", op, " ('",
                  cell.operations[op], "') reads state ", input, " but only states 0..", 1 + p,
                  " exist at that point");
      const bool strided = reduction && input < 2;
      GPIPE_CHECK(!(spec.kind == OperationSpec::Kind::kMaxPool && spec.kernel == 2) || strided,
                  ConfigError, what, ": operation ", op,
                  " is a 2x2 pooling without stride 2, which would shrink the map by one");
      pair_reduced[side] = reduced[input] || strided;
    }
    GPIPE_CHECK(pair_reduced[0] == pair_reduced[1], ConfigError, what, ": pair ", p,
                " adds states of different resolutions");
    reduced.push_back(pair_reduced[0]);
  }
  GPIPE_CHECK(!cell.concat.empty(), ConfigError, what, ": the cell concatenates no state");
  for (int state : cell.concat) {
    GPIPE_CHECK(state >= 0 && state < 2 + kCellPairs, ConfigError, what, ": concatenates state ",
                state, " of 0..", 1 + kCellPairs);
    GPIPE_CHECK(reduced[state], ConfigError, what, ": concatenates state ", state,
                ", which is not at the cell's output resolution");
  }
}

}  // namespace gpipe::models
