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

// y = x * scale, sleeping in forward and backward. The backward sleeps its input-gradient share
// where the engine asks for d x and its weight share where it asks for d scale: a split B sleeps
// the first, its W the second (backward_split.h). Where x needs no gradient (the first layer) the
// input-gradient share is slept with the weight share, so that the layer's backward always takes
// its whole time.
class SleepFunction : public torch::autograd::Function<SleepFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& scale, double forward_ms, double backward_ms,
                               double weight_ms) {
    sleep_ms(forward_ms);
    ctx->save_for_backward({x, scale});
    ctx->saved_data["backward_ms"] = backward_ms;
    ctx->saved_data["weight_ms"] = weight_ms;
    ctx->saved_data["input_needs_grad"] = x.requires_grad();
    return x * scale;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const double weight_ms = ctx->saved_data["weight_ms"].toDouble();
    const auto saved = ctx->get_saved_variables();
    const auto& g = grad_outputs[0];
    const bool input_wanted = ctx->needs_input_grad(0);
    const bool scale_wanted = ctx->needs_input_grad(1);
    if (input_wanted || !ctx->saved_data["input_needs_grad"].toBool())
      sleep_ms(ctx->saved_data["backward_ms"].toDouble() - weight_ms);
    if (scale_wanted) sleep_ms(weight_ms);
    return {input_wanted ? g * saved[1] : torch::Tensor(),
            scale_wanted ? (g * saved[0]).sum().reshape({1}) : torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

class SleepLayer : public Layer {
 public:
  SleepLayer(std::string name, double forward_ms, double backward_ms, double weight_ms)
      : Layer(std::move(name)),
        forward_ms_(forward_ms),
        backward_ms_(backward_ms),
        weight_ms_(weight_ms) {
    scale_ = register_parameter("scale", torch::ones({1}));
  }
  Activations forward(const Activations& inputs) override {
    const auto& x = inputs.at(0);
    if (!torch::GradMode::is_enabled()) {
      sleep_ms(forward_ms_);
      return {x * scale_};
    }
    return {SleepFunction::apply(x, scale_, forward_ms_, backward_ms_, weight_ms_)};
  }

 private:
  double forward_ms_;
  double backward_ms_;
  double weight_ms_;
  torch::Tensor scale_;
};

void check(const SleepOptions& options) {
  GPIPE_CHECK(options.layers() >= 1, ConfigError, "the sleep model needs at least one layer, got ",
              options.layers());
  GPIPE_CHECK(options.forward_ms() >= 0 && options.backward_factor() >= 0, ConfigError,
              "sleep times must be >= 0, got forward ", options.forward_ms(), " ms and factor ",
              options.backward_factor());
  GPIPE_CHECK(options.weight_fraction() >= 0 && options.weight_fraction() <= 1, ConfigError,
              "the weight fraction of the sleep model's backward must be in [0, 1], got ",
              options.weight_fraction());
}

}  // namespace

LayerPtr make_sleep_layer(const SleepOptions& options, int64_t i) {
  check(options);
  GPIPE_CHECK(i >= 0 && i < options.layers(), ConfigError, "the sleep model has ", options.layers(),
              " layers; layer index ", i, " is out of range");
  const double backward_ms = options.forward_ms() * options.backward_factor();
  return std::make_shared<SleepLayer>("sleep_" + std::to_string(i), options.forward_ms(),
                                      backward_ms, backward_ms * options.weight_fraction());
}

LayerList make_sleep_model(const SleepOptions& options) {
  check(options);
  LayerList layers;
  for (int64_t i = 0; i < options.layers(); ++i)
    layers.push_back(make_sleep_layer(options, i));
  return layers;
}

SleepBuilder::SleepBuilder(SleepOptions options, uint64_t init_seed)
    : ModelBuilder(init_seed), options_(std::move(options)) {
  check(options_);
  GPIPE_CHECK(options_.features() >= 1, ConfigError,
              "the sleep model needs at least one feature, got ", options_.features());
}

std::string SleepBuilder::layer_name(int64_t i) const {
  check_layer_index(i);
  return "sleep_" + std::to_string(i);
}

SampleBatch SleepBuilder::sample_batch(int64_t batch_size, uint64_t seed) const {
  GPIPE_CHECK(batch_size >= 1, ConfigError, "a sample batch needs at least one sample, got ",
              batch_size);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({batch_size, options_.features()}, generator),
          torch::randint(0, options_.features(), {batch_size}, generator,
                         torch::TensorOptions(torch::kLong))};
}

}  // namespace gpipe::models
