#include "tables/projection.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "gpipe/errors.h"
#include "gpipe/partition.h"
#include "gpipe/schedule.h"
#include "gpipe/timing.h"
#include "tables/workload.h"

namespace gpipe::tables {
namespace {

// Waits for queued CUDA work, so that a host clock times it (no-op on CPU devices).
void synchronize(const DeviceSpec& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index);
}

}  // namespace

LayerCosts measure_layer_costs(const LayerList& layers, const models::SampleBatch& sample,
                               const LossFn& loss, const DeviceSpec& device,
                               const Pipeline::OptimizerFactory& optimizer,
                               const ProfileOptions& options) {
  GPIPE_CHECK(!layers.empty(), ConfigError, "measuring layer costs needs at least one layer");
  LayerCosts costs;
  costs.microbatch = sample.input.size(0);
  for (const auto& profile : profile_layers(layers, {sample.input}, device, options)) {
    costs.forward_ms.push_back(profile.forward_ms);
    costs.no_grad_forward_ms.push_back(profile.no_grad_forward_ms);
    costs.recompute_ms.push_back(profile.recompute_ms);
    costs.backward_ms.push_back(profile.backward_ms);
    costs.weight_ms.push_back(profile.weight_ms);
    costs.parameter_bytes.push_back(static_cast<double>(profile.parameter_bytes));
    costs.activation_bytes.push_back(static_cast<double>(profile.activation_bytes));
    costs.backward_bytes.push_back(static_cast<double>(profile.backward_bytes));
  }
  const int runs = options.warmup() + options.iterations();
  DeviceWorker worker(device, options.threads());
  worker.run([&] {
    const auto torch_device = device.torch_device();
    // What each layer sends on, and the last output for the loss.
    Activations x = to_device({sample.input}, torch_device);
    {
      torch::NoGradGuard no_grad;
      for (const auto& layer : layers) {
        x = layer->forward(x);
        costs.output_bytes.push_back(static_cast<double>(nbytes(x)));
      }
    }
    const auto target = sample.target.to(torch_device);
    std::vector<double> forward, backward;
    for (int run = 0; run < runs; ++run) {
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

    // One optimizer step per layer, on gradients of ones; the first step creates the state.
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
      for (int run = 0; run < runs; ++run) {
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
  });
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

LinkModel link_in_ms(const LinkModel& link_seconds, const LayerCosts& costs,
                     const std::vector<int64_t>& balance) {
  LinkModel link = link_seconds.in_milliseconds();
  link.boundary_bytes.clear();  // the boundaries of this balance
  int64_t end = 0;
  for (size_t s = 0; s + 1 < balance.size(); ++s) {
    end += balance[s];
    link.boundary_bytes.push_back(costs.output_bytes.at(end - 1));
  }
  return link;
}

SimulationCosts stage_costs_ms(const LayerCosts& costs, const std::vector<int64_t>& balance,
                               const LinkModel& link_seconds) {
  SimulationCosts sim;
  sim.forward = sum_by_stage(costs.forward_ms, balance);
  sim.backward = sum_by_stage(costs.backward_ms, balance);
  if (!costs.weight_ms.empty()) sim.weight = sum_by_stage(costs.weight_ms, balance);
  sim.recompute =
      costs.recompute_ms.empty() ? sim.forward : sum_by_stage(costs.recompute_ms, balance);
  if (!costs.no_grad_forward_ms.empty())
    sim.checkpointed_forward = sum_by_stage(costs.no_grad_forward_ms, balance);
  // The last stage computes the loss in every kind of forward, the replay included.
  for (auto* stages : {&sim.forward, &sim.recompute, &sim.checkpointed_forward}) {
    if (!stages->empty()) stages->back() += costs.loss_forward_ms;
  }
  sim.backward.back() += costs.loss_backward_ms;
  sim.link = link_in_ms(link_seconds, costs, balance);
  return sim;
}

Projection project_step(const LayerCosts& costs, int64_t K, int64_t M, Checkpoint checkpoint,
                        const LinkModel& link_seconds, std::vector<int64_t> balance) {
  GPIPE_CHECK(M >= 1, ConfigError, "M (micro-batches) must be >= 1, got ", M);
  Projection projection;
  projection.balance = balance.empty() ? balance_by_time(costs, K) : std::move(balance);
  GPIPE_CHECK(static_cast<int64_t>(projection.balance.size()) == K, ConfigError, "a balance of ",
              projection.balance.size(), " stages was given for K=", K);
  const auto sim_costs = stage_costs_ms(costs, projection.balance, link_seconds);
  const auto result = simulate(make_schedule(ScheduleKind::kGPipe, K, M), sim_costs, checkpoint);
  const auto updates = sum_by_stage(costs.update_ms, projection.balance);
  projection.pipeline_ms = result.step_time;
  projection.update_ms = *std::max_element(updates.begin(), updates.end());
  projection.step_ms = projection.pipeline_ms + projection.update_ms;
  projection.bubble_fraction = result.bubble_fraction;
  return projection;
}

OneDeviceCalibration calibrate_one_device(const models::ModelBuilder& builder,
                                          const models::SampleBatch& batch, const LayerCosts& costs,
                                          int64_t M, Checkpoint checkpoint,
                                          const std::string& device, const std::string& optimizer,
                                          int warmup, int steps) {
  PipelineShape shape;
  shape.balance = {costs.num_layers()};
  shape.devices = {device};
  shape.M = M;
  shape.checkpoint = checkpoint;
  shape.threads = 1;
  OneDeviceCalibration out;
  out.projected_ms = project_step(costs, 1, M, checkpoint, link_preset("none")).step_ms;
  out.measured_ms =
      measure_training(builder, batch, shape, optimizer, warmup, steps).median_step_ms;
  return out;
}

LayerCosts scaled_compute(LayerCosts costs, double factor) {
  GPIPE_CHECK(factor > 0 && std::isfinite(factor), ConfigError,
              "a calibration factor must be finite and > 0, got ", factor);
  for (auto* times : {&costs.forward_ms, &costs.no_grad_forward_ms, &costs.recompute_ms,
                      &costs.backward_ms, &costs.weight_ms, &costs.update_ms}) {
    for (auto& t : *times)
      t *= factor;
  }
  costs.loss_forward_ms *= factor;
  costs.loss_backward_ms *= factor;
  return costs;
}

bool is_scaled_link(const std::string& name) {
  return name == "pcie-scaled" || name == "tpu-scaled";
}

void check_table_link(const std::string& name) {
  if (is_scaled_link(name)) return;
  try {
    link_preset(name);
  } catch (const ConfigError&) {
    throw ConfigError(c10::str("unknown link '", name,
                               "': expected pcie, nvlink, tpu, none, pcie-scaled or tpu-scaled"));
  }
}

TableLink table_link(const std::string& name, double machine_flops) {
  check_table_link(name);
  TableLink out;
  out.name = name;
  if (!is_scaled_link(name)) {
    out.link = link_preset(name);
    return out;
  }
  GPIPE_CHECK(machine_flops > 0, ConfigError, "the ", name,
              " link needs this machine's compute rate (> 0 FLOP/s), got ", machine_flops);
  const bool pcie = name == "pcie-scaled";
  out.accelerator = pcie ? "P100 (9.3 TFLOPS fp32)" : "TPU v3 core (61.5 TFLOPS bf16)";
  out.accelerator_flops = pcie ? 9.3e12 : 61.5e12;
  out.machine_flops = machine_flops;
  out.factor = machine_flops / out.accelerator_flops;
  out.link = link_preset(pcie ? "pcie" : "tpu").scaled(out.factor);
  return out;
}

double measure_gemm_flops(const DeviceSpec& device, int threads) {
  constexpr int64_t n = 512;
  std::vector<double> ms;
  DeviceWorker worker(device, threads);
  worker.run([&] {
    torch::NoGradGuard no_grad;
    const auto on = torch::TensorOptions().device(device.torch_device());
    const auto a = torch::randn({n, n}, on);
    const auto b = torch::randn({n, n}, on);
    auto c = torch::empty({n, n}, on);
    for (int i = 0; i < 3; ++i)
      torch::mm_out(c, a, b);
    synchronize(device);
    for (int i = 0; i < 15; ++i) {
      const auto start = std::chrono::steady_clock::now();
      torch::mm_out(c, a, b);
      synchronize(device);
      ms.push_back(elapsed_ms(start));
    }
  });
  return 2.0 * n * n * n / (median(ms) / 1e3);
}

double samples_per_second(int64_t batch, double step_ms) {
  GPIPE_CHECK(step_ms > 0, ConfigError, "a step time must be > 0 ms, got ", step_ms);
  return static_cast<double>(batch) * 1e3 / step_ms;
}

}  // namespace gpipe::tables
