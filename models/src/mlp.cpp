#include "gpipe/models/mlp.h"

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

}  // namespace

LayerList make_mlp(const MlpOptions& o) {
  GPIPE_CHECK(o.in_features() >= 1 && o.width() >= 1 && o.classes() >= 1, ConfigError,
              "MLP sizes must be positive: in_features=", o.in_features(), " width=", o.width(),
              " classes=", o.classes());
  GPIPE_CHECK(o.depth() >= 0, ConfigError, "MLP depth must be >= 0, got ", o.depth());
  LayerList layers;
  int64_t in = o.in_features();
  for (int64_t i = 0; i < o.depth(); ++i) {
    layers.push_back(std::make_shared<HiddenLayer>("hidden_" + std::to_string(i), in, o.width(),
                                                   o.dropout(), o.batch_norm()));
    in = o.width();
  }
  layers.push_back(make_layer("classifier", Linear(in, o.classes())));
  return layers;
}

}  // namespace gpipe::models
