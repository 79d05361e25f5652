// AmoebaCell: the genotype's wiring over the operations of amoebanet_ops.
#include "gpipe/models/amoebanet_cell.h"

#include "gpipe/dropout.h"
#include "gpipe/errors.h"

namespace gpipe::models {

AmoebaCell::AmoebaCell(std::string name, AmoebaCellOptions options)
    : Layer(std::move(name)), options_(std::move(options)) {
  const auto& o = options_;
  validate_cell(o.genotype(), o.reduction(), label());
  GPIPE_CHECK(o.in_channels() > 0 && o.skip_channels() > 0 && o.channels() > 0, ConfigError,
              "cell '", label(), "' needs positive channel counts, got in=", o.in_channels(),
              " skip=", o.skip_channels(), " channels=", o.channels());
  GPIPE_CHECK(o.drop_path() >= 0 && o.drop_path() < 1, ConfigError,
              "drop-path probability must be in [0, 1), got ", o.drop_path());
  preprocess_ =
      register_module("preprocess", ConvBn(ConvBnOptions(o.in_channels(), o.channels(), 1)));
  if (o.skip_reduced()) {
    skip_adapter_ = torch::nn::AnyModule(FactorizedReduce(o.skip_channels(), o.channels()));
  } else if (o.skip_channels() != o.channels()) {
    skip_adapter_ = torch::nn::AnyModule(ConvBn(ConvBnOptions(o.skip_channels(), o.channels(), 1)));
  }
  if (!skip_adapter_.is_empty()) register_module("skip", skip_adapter_.ptr());
  for (int i = 0; i < kCellOperations; ++i) {
    const int64_t stride = o.reduction() && o.genotype().inputs[i] < 2 ? 2 : 1;
    operations_.push_back(
        make_cell_operation(parse_operation(o.genotype().operations[i]), o.channels(), stride));
    if (operations_.back().module) {
      register_module("op" + std::to_string(i), operations_.back().module);
    }
  }
}

Activations AmoebaCell::forward(const Activations& inputs) {
  GPIPE_CHECK(inputs.size() == 1 || inputs.size() == 2, ConfigError, "cell '", label(),
              "' takes {x} or {x, skip}, got ", inputs.size(), " tensors");
  const auto& x = inputs[0];
  const auto& skip = inputs.size() == 2 ? inputs[1] : x;
  GPIPE_CHECK(x.dim() == 4 && x.size(1) == options_.in_channels() && skip.dim() == 4 &&
                  skip.size(1) == options_.skip_channels(),
              ConfigError, "cell '", label(), "' expects x with ", options_.in_channels(),
              " channels and skip with ", options_.skip_channels(), ", got sizes ", x.sizes(),
              " and ", skip.sizes());

  constexpr int kStates = 2 + kCellPairs;
  std::array<torch::Tensor, kStates> states;
  std::array<torch::Tensor, kStates> relu_states;  // ReLU of each state, made on first use
  const auto relu_x = torch::relu(x);
  states[0] = preprocess_(relu_x);
  if (skip_adapter_.is_empty()) {
    states[1] = skip;
  } else {
    states[1] = skip_adapter_.forward(inputs.size() == 2 ? torch::relu(skip) : relu_x);
  }
  const auto& genotype = options_.genotype();
  for (int p = 0; p < kCellPairs; ++p) {
    torch::Tensor sum;
    for (int side = 0; side < 2; ++side) {
      const int i = 2 * p + side;
      auto& op = operations_[i];
      const int state = genotype.inputs[i];
      if (op.relu_input && !relu_states[state].defined()) {
        relu_states[state] = torch::relu(states[state]);
      }
      auto y = op.forward(op.relu_input ? relu_states[state] : states[state]);
      if (op.drop_path) y = drop_path(y, options_.drop_path(), is_training());
      sum = side == 0 ? y : sum + y;
    }
    states[2 + p] = sum;
  }
  std::vector<torch::Tensor> outputs;
  outputs.reserve(genotype.concat.size());
  for (int state : genotype.concat)
    outputs.push_back(states[state]);
  if (!options_.emit_skip()) return {torch::cat(outputs, 1)};
  return {torch::cat(outputs, 1), x};
}

}  // namespace gpipe::models
