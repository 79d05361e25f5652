// The reference MLP: [Linear(width, width), ReLU] x depth, then Linear(width, classes).
//
// Why this file exists: it is the model of the engine's benchmark and tests (the 2048-wide MLP
// of docs/design.md, "What this CPU demands"), as a flat layer list: one layer per Linear, with
// the ReLU folded into the hidden ones, so a stage boundary can fall between any two Linears.
// Optional dropout and BatchNorm make the K-invariance and deferred-BatchNorm tests.
#pragma once

#include "gpipe/layer.h"
#include "gpipe/models/model.h"

namespace gpipe::models {

struct MlpOptions {
  MlpOptions(int64_t in_features, int64_t width, int64_t depth, int64_t classes)
      : in_features_(in_features), width_(width), depth_(depth), classes_(classes) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, width);
  // Hidden Linear+ReLU layers; the classifier Linear comes on top.
  TORCH_ARG(int64_t, depth);
  TORCH_ARG(int64_t, classes);
  // Dropout after each hidden ReLU (gpipe::Dropout, deterministic per micro-batch).
  TORCH_ARG(double, dropout) = 0.0;
  // DeferredBatchNorm after each hidden Linear.
  TORCH_ARG(bool, batch_norm) = false;
};

// depth + 1 layers, initialised in order from the default generator as it stands.
LayerList make_mlp(const MlpOptions& options);

// Layer i of make_mlp (0 <= i <= depth): "hidden_i" for i < depth, then "classifier".
LayerPtr make_mlp_layer(const MlpOptions& options, int64_t i);

// The MLP as a ModelBuilder (registry name "mlp"): layer i seeded from (init_seed, i).
class MlpBuilder : public ModelBuilder {
 public:
  explicit MlpBuilder(MlpOptions options, uint64_t init_seed = 0);
  std::string name() const override { return "mlp"; }
  int64_t num_layers() const override { return options_.depth() + 1; }
  std::string layer_name(int64_t i) const override;
  // Features (N, in_features) from N(0, 1) and labels in [0, classes).
  SampleBatch sample_batch(int64_t batch_size, uint64_t seed) const override;
  std::vector<int64_t> sample_shape() const override { return {options_.in_features()}; }
  // Linear weights and biases (and BatchNorm's scale and shift), by formula; tested against
  // built layers.
  int64_t count_layer_parameters(int64_t i) const override;
  bool counts_analytically() const override { return true; }
  const MlpOptions& options() const { return options_; }

 protected:
  LayerPtr make_layer(int64_t i) const override { return make_mlp_layer(options_, i); }

 private:
  MlpOptions options_;
};

}  // namespace gpipe::models
