// The sleep model's layers (a custom autograd function that sleeps), and its ModelBuilder.
#include "gpipe/models/sleep.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <sys/prctl.h>

#include <chrono>
#include <thread>

#include "gpipe/errors.h"

namespace gpipe::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Sleeps until `ms` after `start`. The thread's timer slack is cut to 1 us first: the default
// 50 us slack plus wake-up latency would otherwise add ~5% to a 4 ms layer.
void sleep_ms(double ms,
              std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now()) {
  thread_local bool tuned = [] { return prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0; }();
  (void)tuned;
  std::this_thread::sleep_until(start +
                                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double, std::milli>(ms)));
}

// y = x * scale, sleeping in forward and backward.
class SleepFunction : public torch::autograd::Function<SleepFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& scale, double forward_ms, double backward_ms) {
    sleep_ms(forward_ms);
    ctx->save_for_backward({x, scale});
    ctx->saved_data["backward_ms"] = backward_ms;
    return x * scale;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    sleep_ms(ctx->saved_data["backward_ms"].toDouble());
    const auto saved = ctx->get_saved_variables();
    const auto& g = grad_outputs[0];
    return {g * saved[1], (g * saved[0]).sum().reshape({1}), torch::Tensor(), torch::Tensor()};
  }
};

class SleepLayer : public Layer {
 public:
  SleepLayer(std::string name, double forward_ms, double backward_ms)
      : Layer(std::move(name)), forward_ms_(forward_ms), backward_ms_(backward_ms) {
    scale_ = register_parameter("scale", torch::ones({1}));
  }
  Activations forward(const Activations& inputs) override {
    const auto& x = inputs.at(0);
    if (!torch::GradMode::is_enabled()) {
      sleep_ms(forward_ms_);
      return {x * scale_};
    }
    return {SleepFunction::apply(x, scale_, forward_ms_, backward_ms_)};
  }

 private:
  double forward_ms_;
  double backward_ms_;
  torch::Tensor scale_;
};

void check(const SleepOptions& options) {
  GPIPE_CHECK(options.layers() >= 1, ConfigError, "the sleep model needs at least one layer, got ",
              options.layers());
  GPIPE_CHECK(options.forward_ms() >= 0 && options.backward_factor() >= 0, ConfigError,
              "sleep times must be >= 0, got forward ", options.forward_ms(), " ms and factor ",
              options.backward_factor());
}

}  // namespace

LayerPtr make_sleep_layer(const SleepOptions& options, int64_t i) {
  check(options);
  GPIPE_CHECK(i >= 0 && i < options.layers(), ConfigError, "the sleep model has ", options.layers(),
              " layers; layer index ", i, " is out of range");
  return std::make_shared<SleepLayer>("sleep_" + std::to_string(i), options.forward_ms(),
                                      options.forward_ms() * options.backward_factor());
}

LayerList make_sleep_model(const SleepOptions& options) {
  check(options);
  LayerList layers;
  for (int64_t i = 0; i < options.layers(); ++i)
    layers.push_back(make_sleep_layer(options, i));
  return layers;
}

SleepBuilder::SleepBuilder(SleepOptions options, int64_t features, uint64_t init_seed)
    : ModelBuilder(init_seed), options_(std::move(options)), features_(features) {
  check(options_);
  GPIPE_CHECK(features_ >= 1, ConfigError, "the sleep model needs at least one feature, got ",
              features_);
}

std::string SleepBuilder::layer_name(int64_t i) const {
  check_layer_index(i);
  return "sleep_" + std::to_string(i);
}

SampleBatch SleepBuilder::sample_batch(int64_t batch_size, uint64_t seed) const {
  GPIPE_CHECK(batch_size >= 1, ConfigError, "a sample batch needs at least one sample, got ",
              batch_size);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {
      torch::randn({batch_size, features_}, generator),
      torch::randint(0, features_, {batch_size}, generator, torch::TensorOptions(torch::kLong))};
}

}  // namespace gpipe::models
