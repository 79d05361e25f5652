#include "gpipe/profile.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>

#include "gpipe/backward_split.h"
#include "gpipe/errors.h"
#include "gpipe/memory.h"
#include "gpipe/timing.h"

namespace gpipe {
namespace {

// The layer's forward as a stage runs it: under autocast for `precision` (precision.h).
Activations stage_forward(Layer& layer, const Activations& input, const DeviceSpec& device,
                          Precision precision) {
  AutocastGuard autocast(precision, device.torch_device().type());
  return layer.forward(input);
}

// One forward of `layer` on `input`, in milliseconds: with or without autograd recording, and as
// a first run or as the replay of a recompute. The output is dropped.
double timed_forward(Layer& layer, const Activations& input, size_t index, const DeviceSpec& device,
                     Precision precision, bool grad, bool replay) {
  LayerContext context;
  context.layer = static_cast<int64_t>(index);
  context.recompute = replay;
  LayerContextGuard guard(&context);
  torch::AutoGradMode mode(grad);
  const auto start = std::chrono::steady_clock::now();
  stage_forward(layer, input, device, precision);
  if (device.is_cuda()) torch::cuda::synchronize();
  return elapsed_ms(start);
}

// Whether `layer` holds a module gathering statistics over the step (BatchNorm): its forward
// differs when a recompute replays it.
bool gathers_statistics(Layer& layer) {
  for (const auto& module : layer.modules(/*include_self=*/true)) {
    if (dynamic_cast<StepObserver*>(module.get()) != nullptr) return true;
  }
  return false;
}

// Runs this close agree whatever `settle` says: a backward of a few microseconds varies by more
// than its own size, and no prediction feels it.
constexpr double kSettleFloorMs = 0.05;

// Whether the timed runs so far (at least two) agree within `settle` in every time: each series'
// slowest over its fastest, less 1 (ProfileOptions::settle; 0: never).
bool settled(std::initializer_list<std::vector<double>> series, double settle) {
  if (settle <= 0) return false;
  for (const auto& runs : series) {
    if (runs.size() < 2) return false;
    const auto [lo, hi] = std::minmax_element(runs.begin(), runs.end());
    if (*hi - *lo > settle * *lo && *hi - *lo > kSettleFloorMs) return false;
  }
  return true;
}

// A kept forward (autograd), its backward and its deferred weight gradients, timed, with the
// bytes the forward kept and the backward's workspace above them, as the memory meter saw them.
struct KeptRun {
  double forward_ms = 0, backward_ms = 0, weight_ms = 0;
  int64_t activation_bytes = 0, backward_bytes = 0, weight_bytes = 0;
  Activations output;
};

KeptRun kept_run(Layer& layer, const Activations& input, size_t index, const DeviceSpec& device,
                 Precision precision) {
  KeptRun out;
  const int64_t before = memory::stats(device).current_bytes;
  LayerContext context;
  context.layer = static_cast<int64_t>(index);
  LayerContextGuard guard(&context);
  auto start = std::chrono::steady_clock::now();
  out.output = stage_forward(layer, input, device, precision);
  if (device.is_cuda()) torch::cuda::synchronize();
  out.forward_ms = elapsed_ms(start);
  const memory::PeakWindow backward_window(device);
  const int64_t after_forward = backward_window.start_bytes();
  start = std::chrono::steady_clock::now();
  auto split = backward_input(out.output, {}, input, layer.parameters());
  if (device.is_cuda()) torch::cuda::synchronize();
  out.backward_ms = elapsed_ms(start);
  const bool deferred = !split.weights.empty();
  // After B: the output and the input gradients (still held here), and what W will use.
  const int64_t after_b = memory::stats(device).current_bytes - before;
  out.weight_bytes =
      deferred ? std::max<int64_t>(0, after_b - nbytes(out.output) - nbytes(split.grads)) : 0;
  start = std::chrono::steady_clock::now();
  split.weights.run();
  if (device.is_cuda()) torch::cuda::synchronize();
  out.weight_ms = deferred ? elapsed_ms(start) : 0.0;
  out.activation_bytes = after_forward - before;
  out.backward_bytes = backward_window.peak_bytes() - after_forward;
  return out;
}

// A kept forward and its backward in one pass (no split), the backward timed.
double timed_fused_backward(Layer& layer, const Activations& input, size_t index,
                            const DeviceSpec& device, Precision precision) {
  LayerContext context;
  context.layer = static_cast<int64_t>(index);
  LayerContextGuard guard(&context);
  std::vector<torch::Tensor> roots, grads;
  for (const auto& t : stage_forward(layer, input, device, precision)) {
    if (!t.defined() || !t.requires_grad()) continue;
    roots.push_back(t);
    grads.push_back(torch::ones_like(t));
  }
  if (device.is_cuda()) torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  if (!roots.empty()) torch::autograd::backward(roots, grads);
  if (device.is_cuda()) torch::cuda::synchronize();
  return elapsed_ms(start);
}

// Profiles layer `index` on its input `x` (profile_layers, on the device's worker); replaces `x`
// with the layer's output, detached, for the next layer.
LayerProfile profile_layer(Layer& layer, Activations& x, size_t index, const DeviceSpec& device,
                           const ProfileOptions& options) {
  const auto torch_device = device.torch_device();
  LayerProfile profile;
  if (device.is_cuda()) layer.to(torch_device);
  for (const auto& p : layer.parameters())
    profile.parameter_bytes += static_cast<int64_t>(p.numel() * p.element_size());
  std::vector<double> forward, no_grad_forward, recompute, backward, weight, fused;
  const bool replays_differently = gathers_statistics(layer);
  Activations output;
  for (int run = 0; run < options.warmup() + options.iterations(); ++run) {
    if (settled({forward, no_grad_forward, recompute, backward, weight, fused}, options.settle()))
      break;
    output.clear();  // the previous run's output must not be counted against this one
    const auto input = detach_for_stage(x, torch_device, /*requires_grad=*/index > 0);
    // The forward three ways, as the executor runs it: a checkpointed F (no autograd), its R
    // (autograd; BatchNorm does not gather statistics again) and a kept F (autograd). The first
    // two only in timed runs: the kept F warms the layer up for all three. A layer that gathers
    // no statistics replays its kept F exactly: its R is not timed apart.
    const bool timed = run >= options.warmup();
    const auto precision = options.precision();
    const double n = timed ? timed_forward(layer, input, index, device, precision,
                                           /*grad=*/false, /*replay=*/false)
                           : 0;
    const double r = timed && replays_differently
                         ? timed_forward(layer, input, index, device, precision, /*grad=*/true,
                                         /*replay=*/true)
                         : 0;
    auto kept = kept_run(layer, input, index, device, precision);
    output = std::move(kept.output);
    if (!timed) continue;
    forward.push_back(kept.forward_ms);
    no_grad_forward.push_back(n);
    recompute.push_back(replays_differently ? r : kept.forward_ms);
    backward.push_back(kept.backward_ms + kept.weight_ms);
    weight.push_back(kept.weight_ms);
    // Only a layer that defers a W runs its backward differently whole.
    fused.push_back(kept.weight_ms > 0
                        ? timed_fused_backward(layer, input, index, device, precision)
                        : backward.back());
    profile.activation_bytes = std::max(profile.activation_bytes, kept.activation_bytes);
    profile.backward_bytes = std::max(profile.backward_bytes, kept.backward_bytes);
    profile.weight_bytes = std::max(profile.weight_bytes, kept.weight_bytes);
  }
  for (auto& p : layer.parameters())
    p.mutable_grad().reset();
  profile.forward_ms = median(forward);
  profile.no_grad_forward_ms = median(no_grad_forward);
  profile.recompute_ms = median(recompute);
  profile.backward_ms = median(backward);
  profile.weight_ms = median(weight);
  profile.fused_backward_ms = median(fused);
  x.clear();
  for (const auto& t : output)
    x.push_back(t.defined() ? t.detach() : t);
  // The profile's forwards are no training step: drop what they gathered (BatchNorm's
  // statistics), so a trainer that balances by time starts from untouched layers.
  for (const auto& module : layer.modules(/*include_self=*/true)) {
    if (auto* observer = dynamic_cast<StepObserver*>(module.get())) observer->on_step_abort();
  }
  return profile;
}

}  // namespace

std::vector<LayerProfile> profile_layers(const LayerList& layers, const Activations& sample,
                                         const DeviceSpec& device, const ProfileOptions& options) {
  GPIPE_CHECK(!sample.empty(), ConfigError, "profiling needs a sample micro-batch");
  GPIPE_CHECK(options.iterations() >= 1 && options.warmup() >= 0 && options.settle() >= 0,
              ConfigError, "profiling needs iterations >= 1, warmup >= 0 and settle >= 0, got ",
              options.iterations(), ", ", options.warmup(), " and ", options.settle());
  check_precision_supported(options.precision(), device);
  memory::install();
  DeviceWorker worker(device, options.threads());
  std::vector<LayerProfile> profiles(layers.size());
  worker.run([&] {
    Activations x = to_device(sample, device.torch_device());
    for (size_t i = 0; i < layers.size(); ++i)
      profiles[i] = profile_layer(*layers[i], x, i, device, options);
  });
  return profiles;
}

std::vector<double> layer_costs(const LayerList& layers, BalanceBy by, const Activations& sample,
                                const DeviceSpec& device, const ProfileOptions& options) {
  std::vector<double> costs;
  if (by == BalanceBy::kParams) {
    for (const auto& layer : layers) {
      double count = 0;
      for (const auto& p : layer->parameters())
        count += static_cast<double>(p.numel());
      costs.push_back(count);
    }
    return costs;
  }
  const auto profiles = profile_layers(layers, sample, device, options);
  for (const auto& p : profiles) {
    costs.push_back(by == BalanceBy::kTime
                        ? p.forward_ms + p.backward_ms
                        : static_cast<double>(2 * p.parameter_bytes + p.activation_bytes));
  }
  return costs;
}

std::vector<int64_t> auto_balance(const LayerList& layers, int64_t stages, BalanceBy by,
                                  const Activations& sample, const DeviceSpec& device,
                                  const ProfileOptions& options) {
  return balance_by_cost(layer_costs(layers, by, sample, device, options), stages);
}

}  // namespace gpipe
