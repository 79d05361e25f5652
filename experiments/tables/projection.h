// Projecting a pipeline step onto K devices from per-layer costs measured on this machine.
//
// Why this file exists: Tables 2 and 3 need throughput on K = 2, 4, 8 devices, and a 2-core
// machine has only two. For K devices that are not here, the step time is projected: every
// layer's forward, backward and optimizer-update time is measured on one device at the real
// micro-batch size N/M (small micro-batches lose GEMM efficiency on a CPU, so a cost measured at
// another size would flatter or wrong the projection), the layers are split into K stages by the
// exact min-max partitioner on those times, and the discrete-event simulator runs the GPipe
// schedule with re-materialisation and a link model between stages. The same partition is what
// a measured run uses, so a measured and a projected figure describe the same pipeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/device.h"
#include "gpipe/layer.h"
#include "gpipe/loss.h"
#include "gpipe/models/model.h"
#include "gpipe/pipeline.h"
#include "gpipe/profile.h"
#include "gpipe/simulator.h"

namespace gpipe::tables {

// Per-layer costs of one model at one micro-batch size, in milliseconds.
struct LayerCosts {
  int64_t microbatch = 0;
  std::vector<double> forward_ms;  // forward with autograd recording (also the recompute cost)
  // Forward without autograd, as a checkpointed micro-batch runs it; empty: unknown (forward_ms).
  std::vector<double> no_grad_forward_ms;
  // Forward as a recompute replays it (profile.h); empty: unknown (forward_ms).
  std::vector<double> recompute_ms;
  std::vector<double> backward_ms;   // the whole backward, B and W
  std::vector<double> weight_ms;     // W's part of backward_ms (profile.h); empty: unknown
  std::vector<double> update_ms;     // the optimizer step over the layer's parameters
  std::vector<double> output_bytes;  // what the layer sends on, per micro-batch
  std::vector<double> parameter_bytes;
  std::vector<double> activation_bytes;  // what the forward keeps for the backward (profile.h)
  std::vector<double> backward_bytes;    // what the backward needs on top, at its peak
  double loss_forward_ms = 0;            // the loss on the last layer's output
  double loss_backward_ms = 0;

  int64_t num_layers() const { return static_cast<int64_t>(forward_ms.size()); }
};

// Measures `layers` on `device` at the micro-batch `sample` (input and target of one
// micro-batch), with `options.threads()` intra-op threads: forward and backward by
// profile_layers, the loss's forward and backward, every layer's output size, and one
// `optimizer` step per layer (state created by an untimed step first). Medians of
// `options.iterations()` runs after `options.warmup()`.
LayerCosts measure_layer_costs(const LayerList& layers, const models::SampleBatch& sample,
                               const LossFn& loss, const DeviceSpec& device,
                               const Pipeline::OptimizerFactory& optimizer,
                               const ProfileOptions& options);

// Exact min-max partition of the layers' forward+backward time into K stages. Throws ConfigError
// naming K and the layer count when K is larger than the number of layers, or K < 1.
std::vector<int64_t> balance_by_time(const LayerCosts& costs, int64_t K);

// A link model in the costs' unit (ms): latency in ms, bandwidth in bytes per ms, and the bytes
// crossing each of the stage boundaries of `balance` per micro-batch.
LinkModel link_in_ms(const LinkModel& link_seconds, const LayerCosts& costs,
                     const std::vector<int64_t>& balance);

// Per-stage simulator costs of `balance`: the forward as kept, checkpointed (no autograd) and
// recomputed, the backward and its weight-gradient part W, summed over each stage's layers (a
// kind not profiled is priced as the kept forward); the last stage adds the loss to each forward.
SimulationCosts stage_costs_ms(const LayerCosts& costs, const std::vector<int64_t>& balance,
                               const LinkModel& link_seconds);

struct Projection {
  std::vector<int64_t> balance;
  double pipeline_ms = 0;  // the simulated forward/backward schedule
  double update_ms = 0;    // the slowest stage's optimizer update, after the schedule
  double step_ms = 0;      // pipeline_ms + update_ms
  double bubble_fraction = 0;
};

// The GPipe step of `costs` (measured at micro-batch N/M) on K devices with M micro-batches,
// `checkpoint` re-materialisation and `link_seconds` between stages (link_preset). The balance is
// balance_by_time(costs, K) unless `balance` is given.
Projection project_step(const LayerCosts& costs, int64_t K, int64_t M, Checkpoint checkpoint,
                        const LinkModel& link_seconds, std::vector<int64_t> balance = {});

// Isolated per-layer costs miss part of what a real step through the engine spends (data gone
// cold between a micro-batch's forward and its recompute, the executor's hand-offs), as the
// planner found (plan/cost_book.h). A table calibrates once per model and M: a real one-device
// GPipe step (K=1 on `device`, the row's N and M, `checkpoint`, one intra-op thread) against its
// projection from `costs`, and every projected K of that model and M takes the ratio
// (scaled_compute). The check of a K=2 row against its projection is then the simulator's
// account of K stages, links and bubbles, not a re-measure of one device.
struct OneDeviceCalibration {
  double measured_ms = 0;   // median of the timed one-device steps
  double projected_ms = 0;  // project_step(costs, 1, M, checkpoint, no link)
  double ratio() const { return measured_ms / projected_ms; }
};
OneDeviceCalibration calibrate_one_device(const models::ModelBuilder& builder,
                                          const models::SampleBatch& batch, const LayerCosts& costs,
                                          int64_t M, Checkpoint checkpoint,
                                          const std::string& device, const std::string& optimizer,
                                          int warmup, int steps);
// `costs` with every time (the forwards, backward, W, update and loss) times `factor` (> 0);
// sizes unchanged.
LayerCosts scaled_compute(LayerCosts costs, double factor);

// A link of the tables: a preset of link.h (pcie, nvlink, tpu, none), or pcie-scaled /
// tpu-scaled, that link scaled (LinkModel::scaled) by this machine's compute rate over the
// accelerator's (the paper's P100: 9.3 TFLOPS fp32; a TPU v3 core: 61.5 TFLOPS bf16), so that a
// copy costs the share of a step here that it costs there. The unscaled presets keep real link
// speeds beside this machine's far slower compute, which makes communication look free.
struct TableLink {
  std::string name;
  LinkModel link;     // in seconds
  double factor = 1;  // this machine's FLOP/s over the accelerator's; 1 when not scaled
  double machine_flops = 0;
  double accelerator_flops = 0;  // 0 when not scaled
  std::string accelerator;
  bool scaled() const { return accelerator_flops > 0; }
};
// Whether `name` is pcie-scaled or tpu-scaled.
bool is_scaled_link(const std::string& name);
// Throws ConfigError naming the links for an unknown name.
void check_table_link(const std::string& name);
// The link `name`; a scaled one uses `machine_flops` (> 0; measure_gemm_flops).
TableLink table_link(const std::string& name, double machine_flops);
// The fp32 GEMM rate of `device` (on `threads` intra-op threads for a CPU device), in FLOP/s:
// the median of timed 512x512 products on a device worker, as the per-layer profiles run.
double measure_gemm_flops(const DeviceSpec& device, int threads);

// N samples per step of `step_ms`.
double samples_per_second(int64_t batch, double step_ms);

}  // namespace gpipe::tables
