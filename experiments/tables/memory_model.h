// A memory model of a pipeline training step, from per-layer bytes measured at one micro-batch.
//
// Why this file exists: finding the largest model that fits a memory budget (GPipe's Table 1)
// by measured steps alone would take dozens of full training steps of ever larger models. The
// search instead predicts each stage's peak from a cheap per-layer memory profile (parameter
// bytes, bytes a layer's forward keeps for its backward, bytes it sends on) and the run's shape:
//
//   state   = parameter bytes x (2 + optimizer state slots)        (parameters, gradients, state)
//   no re-materialisation:  peak = state + M x (activations of the stage's layers per micro-batch)
//   re-materialisation:     peak = state + activations of one micro-batch
//                                  + M x (the stage's output per micro-batch, unless last stage)
//
// (a checkpointed stage keeps only its input, which the previous stage allocated and is charged
// for; the recompute before a backward holds one micro-batch's activations at a time). The model
// is calibrated by the measured steps of the search (size_search.h), and every reported size is
// confirmed by a measured step, so it only has to be roughly right and monotone.
#pragma once

#include <cstdint>
#include <vector>

#include "gpipe/device.h"
#include "gpipe/layer.h"
#include "gpipe/models/model.h"

namespace gpipe::tables {

struct MemoryProfile {
  int64_t microbatch = 0;  // the micro-batch the bytes were measured at
  std::vector<double> parameter_bytes;
  std::vector<double> activation_bytes;
  std::vector<double> output_bytes;

  int64_t num_layers() const { return static_cast<int64_t>(parameter_bytes.size()); }
  double total_parameter_bytes() const;
};

// Runs `layers` once on `sample` (one micro-batch) on `device` with `threads` intra-op threads:
// profile_layers' parameter and kept-activation bytes, and each layer's output bytes.
MemoryProfile profile_memory(const LayerList& layers, const models::SampleBatch& sample,
                             const DeviceSpec& device, int threads);

// How a step runs, for the model.
struct MemoryShape {
  int64_t batch = 1;        // N
  int64_t chunks = 1;       // M; micro-batches of N / M
  bool recompute = false;   // re-materialisation (checkpoint always)
  int64_t state_slots = 0;  // optimizer state tensors per parameter (RMSProp 1, Adam 2)
};

// Additive per-layer cost for the partitioner: the layer's state plus the activations it keeps
// at its peak (one micro-batch with re-materialisation, all M without).
std::vector<double> layer_memory_costs(const MemoryProfile& profile, const MemoryShape& shape);
// Exact min-max partition of layer_memory_costs into K stages; throws ConfigError for K larger
// than the number of layers.
std::vector<int64_t> balance_by_memory(const MemoryProfile& profile, const MemoryShape& shape,
                                       int64_t K);
// Predicted peak bytes of each stage of `balance` (see the formula above).
std::vector<double> predict_stage_bytes(const MemoryProfile& profile,
                                        const std::vector<int64_t>& balance,
                                        const MemoryShape& shape);

}  // namespace gpipe::tables
