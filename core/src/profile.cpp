#include "gpipe/profile.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>

#include "gpipe/errors.h"
#include "gpipe/memory.h"
#include "gpipe/timing.h"
#include "gpipe/weight_grad.h"

namespace gpipe {
namespace {

// Backward from `outputs` with unit gradients on everything that requires grad.
void backward_all(const Activations& outputs) {
  std::vector<torch::Tensor> roots, grads;
  for (const auto& t : outputs) {
    if (t.defined() && t.requires_grad()) {
      roots.push_back(t);
      grads.push_back(torch::ones_like(t));
    }
  }
  if (!roots.empty()) torch::autograd::backward(roots, grads);
}

}  // namespace

std::vector<LayerProfile> profile_layers(const LayerList& layers, const Activations& sample,
                                         const DeviceSpec& device, const ProfileOptions& options) {
  GPIPE_CHECK(!sample.empty(), ConfigError, "profiling needs a sample micro-batch");
  GPIPE_CHECK(options.iterations() >= 1 && options.warmup() >= 0, ConfigError,
              "profiling needs iterations >= 1 and warmup >= 0, got ", options.iterations(),
              " and ", options.warmup());
  memory::install();
  DeviceWorker worker(device, options.threads());
  std::vector<LayerProfile> profiles(layers.size());
  worker.run([&] {
    const auto torch_device = device.torch_device();
    Activations x = to_device(sample, torch_device);
    for (size_t i = 0; i < layers.size(); ++i) {
      auto& layer = *layers[i];
      auto& profile = profiles[i];
      const bool was_cuda_moved = device.is_cuda();
      if (was_cuda_moved) layer.to(torch_device);
      for (const auto& p : layer.parameters()) {
        profile.parameter_bytes += static_cast<int64_t>(p.numel() * p.element_size());
      }
      std::vector<double> forward, backward, weight;
      Activations output;
      for (int run = 0; run < options.warmup() + options.iterations(); ++run) {
        output.clear();  // the previous run's output must not be counted against this one
        const auto input = detach_for_stage(x, torch_device, /*requires_grad=*/i > 0);
        const int64_t before = memory::stats(device).current_bytes;
        WeightGradQueue weight_grads;
        weight_grads.set_deferring(true);
        LayerContext context;
        context.layer = static_cast<int64_t>(i);
        context.weight_grad_token = weight_grads.token();
        LayerContextGuard guard(&context);
        auto start = std::chrono::steady_clock::now();
        output = layer.forward(input);
        if (device.is_cuda()) torch::cuda::synchronize();
        const double f = elapsed_ms(start);
        const memory::PeakWindow backward_window(device);
        const int64_t after_forward = backward_window.start_bytes();
        start = std::chrono::steady_clock::now();
        backward_all(output);
        if (device.is_cuda()) torch::cuda::synchronize();
        const double b = elapsed_ms(start);
        const bool deferred = !weight_grads.empty();
        start = std::chrono::steady_clock::now();
        weight_grads.run();
        if (device.is_cuda()) torch::cuda::synchronize();
        const double w = deferred ? elapsed_ms(start) : 0.0;
        if (run >= options.warmup()) {
          forward.push_back(f);
          backward.push_back(b + w);
          weight.push_back(w);
          profile.activation_bytes = std::max(profile.activation_bytes, after_forward - before);
          profile.backward_bytes =
              std::max(profile.backward_bytes, backward_window.peak_bytes() - after_forward);
        }
      }
      for (auto& p : layer.parameters())
        p.mutable_grad().reset();
      profile.forward_ms = median(forward);
      profile.backward_ms = median(backward);
      profile.weight_ms = median(weight);
      x.clear();
      for (const auto& t : output)
        x.push_back(t.defined() ? t.detach() : t);
    }
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
