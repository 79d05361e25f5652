// AmoebaNet genotypes: which operations a cell applies to which hidden states.
//
// Why this file exists: AmoebaNet-D and AmoebaNet-B differ only in their two cells, found by
// regularized evolution (Real et al., "Regularized Evolution for Image Classifier Architecture
// Search", arXiv 1802.01548) and published as data in the TensorFlow reference implementation
// (tensorflow/tpu, models/official/amoeba_net/model_specs.py). This file holds those genotypes
// as data, parses their operation names, and checks that a genotype is well formed, so the cell
// code stays generic.
//
// A cell starts from two hidden states, 0 (the previous cell's output) and 1 (the one before).
// Pair p (p = 0..4) applies operations[2p] to state inputs[2p] and operations[2p+1] to state
// inputs[2p+1], adds the two, and appends the sum as state 2+p. The cell's output is the
// channel concatenation of the states listed in `concat` (in the reference's terms, the states
// whose used_hiddenstates entry is 0). In a reduction cell the operations applied to states 0
// and 1 have stride 2.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace gpipe::models {

// One operation of a cell, parsed from its genotype name.
struct OperationSpec {
  enum class Kind {
    kIdentity,   // "none": identity, or a strided ReLU-1x1 conv-BN when the stride is 2
    kConv,       // "1x1", "3x3", "1x7_7x1": ReLU-conv-BN; 3x3 and 1x7_7x1 with a 1/4 bottleneck
    kSeparable,  // "separable_KxK_N", "dil_D_separable_KxK_N": N stacked separable convolutions
    kMaxPool,    // "max_pool_KxK"
    kAvgPool,    // "avg_pool_KxK"
  };
  Kind kind = Kind::kIdentity;
  std::string name;
  int kernel = 1;           // square kernel side; 7 for 1x7_7x1
  bool factorized = false;  // 1x7 then 7x1 instead of a square kernel
  int repeats = 1;          // stacked separable convolutions
  int dilation = 1;         // separable convolutions only
};

// Parses a genotype operation name; throws ConfigError for names it does not know.
OperationSpec parse_operation(const std::string& name);

constexpr int kCellPairs = 5;
constexpr int kCellOperations = 2 * kCellPairs;

struct CellGenotype {
  std::array<std::string, kCellOperations> operations;
  std::array<int, kCellOperations> inputs;
  std::vector<int> concat;
};

struct Genotype {
  std::string name;
  CellGenotype normal;
  CellGenotype reduction;
};

// The published genotypes (model_specs.py's amoeba_net_d / amoeba_net_b).
const Genotype& amoebanet_d_genotype();
const Genotype& amoebanet_b_genotype();

// Throws ConfigError unless every operation parses, every input names an existing state, and
// (in a reduction cell, where only operations on states 0 and 1 stride) both operands of every
// sum and every concatenated state have the same resolution, and 2x2 pooling only strides.
void validate_cell(const CellGenotype& cell, bool reduction, const std::string& what);

}  // namespace gpipe::models
