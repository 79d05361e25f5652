#include "costs/layer_costs.h"

#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <cmath>

#include "gpipe/errors.h"
#include "gpipe/partition.h"
#include "gpipe/timing.h"

namespace gpipe::costs {

void synchronize(const DeviceSpec& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index);
}

namespace {

// What each layer sends on as a stage boundary under `precision` (the compute dtype; the last
// layer's output in fp32, as the last stage hands it to the loss), and that last output.
Activations measure_output_bytes(const LayerList& layers, const Activations& input,
                                 const DeviceSpec& device, Precision precision, LayerCosts& costs) {
  torch::NoGradGuard no_grad;
  Activations x = input;
  for (size_t i = 0; i < layers.size(); ++i) {
    {
      AutocastGuard autocast(precision, device.torch_device().type());
      x = layers[i]->forward(x);
    }
    const bool last = i + 1 == layers.size();
    // The next layer takes the output as it is (a stage's layers take its input as fp32).
    const auto sent = precision == Precision::kFp32
                          ? x
                          : cast_floating(x, last ? torch::kFloat : compute_dtype(precision));
    costs.output_bytes.push_back(static_cast<double>(nbytes(sent)));
    if (last) return sent;
  }
  return x;
}

// The loss's forward and backward on the model's output `x` (fp32), medians of the timed runs.
void time_loss(const Activations& x, const torch::Tensor& target, const LossFn& loss,
               const DeviceSpec& device, const ProfileOptions& options, LayerCosts& costs) {
  const auto torch_device = device.torch_device();
  std::vector<double> forward, backward;
  for (int run = 0; run < options.warmup() + options.iterations(); ++run) {
    const auto output = detach_for_stage(x, torch_device, /*requires_grad=*/true);
    synchronize(device);
    auto start = std::chrono::steady_clock::now();
    auto value = loss(output, target);
    synchronize(device);
    const double f = elapsed_ms(start);
    start = std::chrono::steady_clock::now();
    value.backward();
    synchronize(device);
    const double b = elapsed_ms(start);
    if (run >= options.warmup()) {
      forward.push_back(f);
      backward.push_back(b);
    }
  }
  costs.loss_forward_ms = median(forward);
  costs.loss_backward_ms = median(backward);
}

// One optimizer step per layer, on gradients of ones; the first step creates the state.
void time_updates(const LayerList& layers, const DeviceSpec& device,
                  const Pipeline::OptimizerFactory& optimizer, const ProfileOptions& options,
                  LayerCosts& costs) {
  for (const auto& layer : layers) {
    auto params = layer->parameters();
    if (params.empty()) {
      costs.update_ms.push_back(0);
      continue;
    }
    for (auto& p : params)
      p.mutable_grad() = torch::ones_like(p);
    auto opt = optimizer(params);
    opt->step();
    std::vector<double> times;
    for (int run = 0; run < options.warmup() + options.iterations(); ++run) {
      synchronize(device);
      const auto start = std::chrono::steady_clock::now();
      opt->step();
      synchronize(device);
      if (run >= options.warmup()) times.push_back(elapsed_ms(start));
    }
    costs.update_ms.push_back(median(times));
    opt.reset();
    for (auto& p : params)
      p.mutable_grad().reset();
  }
}

}  // namespace

LayerCosts measure_layer_costs(const LayerList& layers, const models::SampleBatch& sample,
                               const LossFn& loss, const DeviceSpec& device,
                               const Pipeline::OptimizerFactory& optimizer,
                               const ProfileOptions& options) {
  GPIPE_CHECK(!layers.empty(), ConfigError, "measuring layer costs needs at least one layer");
  LayerCosts costs;
  costs.microbatch = sample.input.size(0);
  costs.precision = options.precision();
  for (const auto& profile : profile_layers(layers, {sample.input}, device, options)) {
    costs.forward_ms.push_back(profile.forward_ms);
    costs.no_grad_forward_ms.push_back(profile.no_grad_forward_ms);
    costs.recompute_ms.push_back(profile.recompute_ms);
    costs.backward_ms.push_back(profile.backward_ms);
    costs.weight_ms.push_back(profile.weight_ms);
    costs.fused_backward_ms.push_back(profile.fused_backward_ms);
    costs.parameter_bytes.push_back(static_cast<double>(profile.parameter_bytes));
    costs.activation_bytes.push_back(static_cast<double>(profile.activation_bytes));
    costs.backward_bytes.push_back(static_cast<double>(profile.backward_bytes));
    costs.weight_bytes.push_back(static_cast<double>(profile.weight_bytes));
  }
  DeviceWorker worker(device, options.threads());
  worker.run([&] {
    const auto torch_device = device.torch_device();
    const auto x = measure_output_bytes(layers, to_device({sample.input}, torch_device), device,
                                        options.precision(), costs);
    time_loss(x, sample.target.to(torch_device), loss, device, options, costs);
    time_updates(layers, device, optimizer, options, costs);
  });
  return costs;
}

LayerCosts scaled_compute(LayerCosts costs, double factor) {
  GPIPE_CHECK(factor > 0 && std::isfinite(factor), ConfigError,
              "a calibration factor must be finite and > 0, got ", factor);
  for (auto* times :
       {&costs.forward_ms, &costs.no_grad_forward_ms, &costs.recompute_ms, &costs.backward_ms,
        &costs.weight_ms, &costs.fused_backward_ms, &costs.update_ms}) {
    for (auto& t : *times)
      t *= factor;
  }
  costs.loss_forward_ms *= factor;
  costs.loss_backward_ms *= factor;
  return costs;
}

std::vector<int64_t> balance_by_time(const LayerCosts& costs, int64_t K) {
  GPIPE_CHECK(K >= 1, ConfigError, "K (partitions) must be >= 1, got ", K);
  GPIPE_CHECK(K <= costs.num_layers(), ConfigError, "K=", K, " partitions need at least ", K,
              " layers, but the model has ", costs.num_layers(),
              "; use a deeper model or K <= ", costs.num_layers());
  std::vector<double> total;
  for (int64_t i = 0; i < costs.num_layers(); ++i) {
    total.push_back(costs.forward_ms[i] + costs.backward_ms[i]);
  }
  return balance_by_cost(total, K);
}

}  // namespace gpipe::costs
