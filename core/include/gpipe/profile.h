// Per-layer profiling: forward and backward time, activation and parameter memory.
//
// Why this file exists: balancing a pipeline by time or by memory needs each layer's cost as
// measured on the device it will run on. profile_layers runs every layer, in order, on one
// sample micro-batch, on a worker thread bound to that device (so the memory meter charges it),
// with warm-up runs first and the median of the timed runs reported. The forward is timed as each
// of the executor's three kinds runs it (kept, checkpointed, recomputed), and the backward both
// ways: split, as zero-bubble schedules run it, so the weight-gradient part is timed apart, and
// whole, as every other schedule runs it (a split visits each weight node twice). Profiling
// leaves the layers as it found them: BatchNorm statistics gathered by it are dropped.
#pragma once

#include <vector>

#include "gpipe/device.h"
#include "gpipe/layer.h"
#include "gpipe/partition.h"
#include "gpipe/precision.h"

namespace gpipe {

struct LayerProfile {
  double forward_ms = 0;  // with autograd recording, as a kept forward runs
  // The forward without autograd, as a checkpointed forward runs (its activations are dropped).
  double no_grad_forward_ms = 0;
  // The forward as a recompute replays it: with autograd, but BatchNorm does not gather its
  // running statistics again (a double-precision pass over the input), so it can be cheaper.
  double recompute_ms = 0;
  double backward_ms = 0;  // the whole backward as a split runs it: B and W together
  // The weight-gradient part (W) of backward_ms: what a split backward leaves for W
  // (backward_split.h); 0 for a layer without parameters.
  double weight_ms = 0;
  // The backward in one pass, as a schedule that does not split it runs it. Timed apart only for
  // a layer that defers a W; for any other it is backward_ms (the same run, timed once).
  double fused_backward_ms = 0;
  int64_t parameter_bytes = 0;
  // Bytes the layer's forward keeps alive for its backward (its output and saved tensors).
  int64_t activation_bytes = 0;
  // Bytes a split B leaves held until W: what the weight nodes saved and the gradients they
  // received (backward_split.h); 0 without parameters.
  int64_t weight_bytes = 0;
  // Bytes the backward needs above what the forward kept, at its peak (gradients of the layer's
  // output and input, workspace).
  int64_t backward_bytes = 0;
};

struct ProfileOptions {
  TORCH_ARG(int, warmup) = 1;
  TORCH_ARG(int, iterations) = 3;
  TORCH_ARG(int, threads) = 1;  // intra-op threads while profiling
  // Stop a layer's timed runs early once two or more agree within this fraction in every time
  // measured (slowest over fastest, less 1; or within 0.05 ms); 0: always run `iterations`. With 3
  // iterations the median reported then differs from the median of all three by at most settle / 2
  // (the median of three lies between any two of them), and a big layer on a quiet machine costs
  // about a quarter less (one timed run of three; the warm-up stays).
  TORCH_ARG(double, settle) = 0;
  // What the layers compute in: each forward runs under autocast as a stage's does, so times
  // and bytes are those of that precision (precision.h).
  TORCH_ARG(Precision, precision) = Precision::kFp32;
};

// Profiles `layers` in training mode on `sample` (one micro-batch) on `device`.
std::vector<LayerProfile> profile_layers(const LayerList& layers, const Activations& sample,
                                         const DeviceSpec& device,
                                         const ProfileOptions& options = {});

// Cost per layer for the partitioner: parameter count (no run needed), forward+backward
// milliseconds, or memory bytes (parameters and their gradients plus the activations one
// micro-batch keeps). `sample` is needed for time and memory.
std::vector<double> layer_costs(const LayerList& layers, BalanceBy by,
                                const Activations& sample = {}, const DeviceSpec& device = {},
                                const ProfileOptions& options = {});

// layer_costs, then the exact min-max partition into `stages`.
std::vector<int64_t> auto_balance(const LayerList& layers, int64_t stages, BalanceBy by,
                                  const Activations& sample = {}, const DeviceSpec& device = {},
                                  const ProfileOptions& options = {});

}  // namespace gpipe
