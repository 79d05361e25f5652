// One prediction of a pipeline's memory: the lowered schedule replayed over each layer's bytes.
//
// Why this file exists: the planner must know whether a plan fits its devices before it runs it,
// and the search for the largest model that fits (GPipe's Table 1) must predict dozens of sizes
// for each one it measures. Both ask the same question - each device's peak bytes for a schedule,
// a balance and a re-materialisation mode - and answer it here, one way:
//
//   state    = parameter bytes x (2 + optimizer state slots)   (parameters, gradients, state)
//   replay   = the device's lowered actions in order: F adds the stage's kept activations (only
//              its input when the micro-batch is checkpointed), R adds them back, B frees them
//              (all but those of layers that defer W, under a split backward), W frees the rest;
//              each B also needs its backward's workspace while it runs
//   peak     = state + the largest bytes held at any point of the replay
//
// The last stage keeps the loss's input as well. A stage's input is the previous stage's output,
// charged to the stage that keeps it. Balancing by memory counts the micro-batches whose
// activations a device holds at its peak (kept_microbatches).
#pragma once

#include <cstdint>
#include <vector>

#include "costs/layer_costs.h"
#include "gpipe/schedule.h"

namespace gpipe::costs {

// Predicted peak bytes of each device of `schedule` (lowered here with `checkpoint`) when
// virtual stage s holds `stage_balance[s]` layers of `costs`, with an optimizer keeping
// `state_slots` tensors per parameter. An empty `costs.weight_ms` means no layer defers its
// weight gradients.
std::vector<double> predict_peak_bytes(const LayerCosts& costs, const Schedule& schedule,
                                       const std::vector<int64_t>& stage_balance,
                                       Checkpoint checkpoint, int64_t state_slots);

// Micro-batches whose activations a device holds at its peak under `schedule`: the schedule's
// largest peak_inflight without re-materialisation (M under gpipe, about K under 1f1b), 1 with it
// (one replay at a time; the inputs kept per micro-batch are small beside it).
double kept_microbatches(const Schedule& schedule, Checkpoint checkpoint);

// Each layer's bytes for a partitioner: its state plus `kept` micro-batches of its activations.
std::vector<double> layer_memory_bytes(const LayerCosts& costs, int64_t state_slots, double kept);

// Exact min-max partition of layer_memory_bytes into K stages. Throws ConfigError naming K and
// the layer count when K is larger than the number of layers, or K < 1.
std::vector<int64_t> balance_by_memory(const LayerCosts& costs, int64_t K, int64_t state_slots,
                                       double kept);

// `costs` with every per-micro-batch size (activations, outputs, backward workspace) times
// `factor` (> 0): the costs of a micro-batch `factor` times the one measured. Parameter bytes
// and times unchanged.
LayerCosts scaled_bytes(LayerCosts costs, double factor);

}  // namespace gpipe::costs
