// The reference MLP's layers, and its ModelBuilder.
#include "gpipe/models/mlp.h"

#include <ATen/CPUGeneratorImpl.h>

#include "gpipe/batchnorm.h"
#include "gpipe/dropout.h"
#include "gpipe/errors.h"
#include "gpipe/linear.h"

namespace gpipe::models {
namespace {

// Linear, [BatchNorm], ReLU, [Dropout] as one layer.
class HiddenLayer : public Layer {
 public:
  HiddenLayer(std::string name, int64_t in, int64_t out, double dropout, bool batch_norm)
      : Layer(std::move(name)) {
    linear_ = register_module("linear", Linear(in, out));
    if (batch_norm) norm_ = register_module("norm", DeferredBatchNorm(out));
    if (dropout > 0) dropout_ = register_module("dropout", Dropout(dropout));
  }

  Activations forward(const Activations& inputs) override {
    auto x = linear_(inputs.at(0));
    if (norm_) x = norm_(x);
    x = torch::relu(x);
    if (dropout_) x = dropout_(x);
    return {x};
  }

 private:
  Linear linear_{nullptr};
  DeferredBatchNorm norm_{nullptr};
  Dropout dropout_{nullptr};
};

void check(const MlpOptions& o) {
  GPIPE_CHECK(o.in_features() >= 1 && o.width() >= 1 && o.classes() >= 1, ConfigError,
              "MLP sizes must be positive: in_features=", o.in_features(), " width=", o.width(),
              " classes=", o.classes());
  GPIPE_CHECK(o.depth() >= 0, ConfigError, "MLP depth must be >= 0, got ", o.depth());
}

std::string mlp_layer_name(const MlpOptions& o, int64_t i) {
  return i < o.depth() ? "hidden_" + std::to_string(i) : "classifier";
}

}  // namespace

LayerPtr make_mlp_layer(const MlpOptions& o, int64_t i) {
  check(o);
  GPIPE_CHECK(i >= 0 && i <= o.depth(), ConfigError, "the MLP has ", o.depth() + 1,
              " layers; layer index ", i, " is out of range");
  const int64_t in = i == 0 ? o.in_features() : o.width();
  if (i < o.depth()) {
    return std::make_shared<HiddenLayer>(mlp_layer_name(o, i), in, o.width(), o.dropout(),
                                         o.batch_norm());
  }
  return make_layer(mlp_layer_name(o, i), Linear(in, o.classes()));
}

LayerList make_mlp(const MlpOptions& o) {
  check(o);
  LayerList layers;
  for (int64_t i = 0; i <= o.depth(); ++i)
    layers.push_back(make_mlp_layer(o, i));
  return layers;
}

MlpBuilder::MlpBuilder(MlpOptions options, uint64_t init_seed)
    : ModelBuilder(init_seed), options_(std::move(options)) {
  check(options_);
}

std::string MlpBuilder::layer_name(int64_t i) const {
  check_layer_index(i);
  return mlp_layer_name(options_, i);
}

int64_t MlpBuilder::count_layer_parameters(int64_t i) const {
  check_layer_index(i);
  const auto& o = options_;
  const bool hidden = i < o.depth();
  const int64_t in = i == 0 ? o.in_features() : o.width();
  const int64_t out = hidden ? o.width() : o.classes();
  return in * out + out + (hidden && o.batch_norm() ? 2 * out : 0);
}

SampleBatch MlpBuilder::sample_batch(int64_t batch_size, uint64_t seed) const {
  GPIPE_CHECK(batch_size >= 1, ConfigError, "a sample batch needs at least one sample, got ",
              batch_size);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({batch_size, options_.in_features()}, generator),
          torch::randint(0, options_.classes(), {batch_size}, generator,
                         torch::TensorOptions(torch::kLong))};
}

}  // namespace gpipe::models
