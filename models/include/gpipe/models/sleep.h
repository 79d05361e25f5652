// The sleep model: layers that take a fixed time whatever the micro-batch size.
//
// Why this file exists: a schedule's shape (bubble, overlap, order) should be measurable on any
// machine, however many cores it has. Each layer sleeps `forward_ms` in forward (and in a
// recompute) and 2 x forward_ms in backward, then scales its input by one learnable scalar, so
// the pipeline still has gradients to pass and parameters to update. Sleeping threads need no
// core, so K stages overlap perfectly even on a 2-core machine.
#pragma once

#include "gpipe/layer.h"
#include "gpipe/models/model.h"

namespace gpipe::models {

struct SleepOptions {
  SleepOptions(int64_t layers, double forward_ms) : layers_(layers), forward_ms_(forward_ms) {}
  TORCH_ARG(int64_t, layers);
  TORCH_ARG(double, forward_ms);
  // Backward time as a multiple of forward time.
  TORCH_ARG(double, backward_factor) = 2.0;
  // Share of the backward that is the weight gradient: deferred to W under zero-bubble schedules.
  TORCH_ARG(double, weight_fraction) = 0.5;
  // Width of the features every layer keeps (the sample batch's input and classes).
  TORCH_ARG(int64_t, features) = 32;
};

LayerList make_sleep_model(const SleepOptions& options);

// Layer i of make_sleep_model ("sleep_i").
LayerPtr make_sleep_layer(const SleepOptions& options, int64_t i);

// The sleep model as a ModelBuilder (registry name "sleep"). Its layers keep the feature width,
// so sample_batch's features (N, features) double as logits over `features` classes.
class SleepBuilder : public ModelBuilder {
 public:
  explicit SleepBuilder(SleepOptions options, uint64_t init_seed = 0);
  std::string name() const override { return "sleep"; }
  int64_t num_layers() const override { return options_.layers(); }
  std::string layer_name(int64_t i) const override;
  // Features (N, features) from N(0, 1) and labels in [0, features).
  SampleBatch sample_batch(int64_t batch_size, uint64_t seed) const override;
  std::vector<int64_t> sample_shape() const override { return {options_.features()}; }
  const SleepOptions& options() const { return options_; }

 protected:
  LayerPtr make_layer(int64_t i) const override { return make_sleep_layer(options_, i); }

 private:
  SleepOptions options_;
};

}  // namespace gpipe::models
