// Each layer's time and bytes at one micro-batch size, measured on this machine.
//
// Why this file exists: every figure this project predicts rather than measures - the planner's
// plans, the projected columns of Tables 2 and 3, the sizes of Table 1 - starts from what each
// layer of the model costs: its forward (kept, checkpointed and replayed), its backward and that
// backward's weight-gradient part, its optimizer update, and the bytes it keeps, sends and needs.
// A CPU's GEMMs lose efficiency on small micro-batches, so the costs are measured at the
// micro-batch the prediction is about, not scaled from another. One record type and one
// measurement serve the planner and the table drivers alike.
#pragma once

#include <cstdint>
#include <vector>

#include "gpipe/device.h"
#include "gpipe/layer.h"
#include "gpipe/loss.h"
#include "gpipe/models/model.h"
#include "gpipe/pipeline.h"
#include "gpipe/profile.h"

namespace gpipe::costs {

// Per-layer costs of one model at one micro-batch size, in milliseconds and bytes.
struct LayerCosts {
  int64_t microbatch = 0;
  Precision precision = Precision::kFp32;  // what the layers computed in
  std::vector<double> forward_ms;  // forward with autograd recording (also the recompute cost)
  // Forward without autograd, as a checkpointed micro-batch runs it; empty: unknown (forward_ms).
  std::vector<double> no_grad_forward_ms;
  // Forward as a recompute replays it (profile.h); empty: unknown (forward_ms).
  std::vector<double> recompute_ms;
  std::vector<double> backward_ms;  // the whole backward, B and W, as a split runs them
  std::vector<double> weight_ms;    // W's part of backward_ms (profile.h); empty: unknown
  // The backward in one pass, as a schedule that does not split it runs it (profile.h); empty:
  // unknown (backward_ms).
  std::vector<double> fused_backward_ms;
  std::vector<double> update_ms;     // the optimizer step over the layer's parameters
  std::vector<double> output_bytes;  // what the layer sends on, per micro-batch
  std::vector<double> parameter_bytes;
  std::vector<double> activation_bytes;  // what the forward keeps for the backward (profile.h)
  std::vector<double> backward_bytes;    // what the backward needs on top, at its peak
  // What a split B leaves held until W (profile.h); empty: unknown (activation_bytes of the
  // layers with a W).
  std::vector<double> weight_bytes;
  double loss_forward_ms = 0;  // the loss on the last layer's output
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

// `costs` with every time (the forwards, backward, W, update and loss) times `factor` (> 0);
// sizes unchanged.
LayerCosts scaled_compute(LayerCosts costs, double factor);

// Exact min-max partition of the layers' forward+backward time into K stages. Throws ConfigError
// naming K and the layer count when K is larger than the number of layers, or K < 1.
std::vector<int64_t> balance_by_time(const LayerCosts& costs, int64_t K);

// Waits for queued CUDA work on `device`, so that a host clock times it (no-op on a CPU device).
void synchronize(const DeviceSpec& device);

}  // namespace gpipe::costs
