// Discrete-event simulation of a pipeline schedule from costs.
//
// Why this file exists: it predicts what the executor will do — step time, bubble, memory in
// flight — from per-stage costs alone, and projects a measured single-machine profile onto K
// devices that are not there. It reads the same lowered Schedule the executor runs and adds no
// rule of its own: a device runs its list in order; a RECV waits for its SEND's message; a SEND
// does not block the sender, and a link between two devices carries one message per direction
// at a time (latency + bytes / bandwidth); a message between two virtual stages of one device
// costs nothing.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "gpipe/link.h"
#include "gpipe/schedule.h"
#include "gpipe/stage.h"

namespace gpipe {

struct SimulationCosts {
  // Per virtual stage, per micro-batch, in any time unit (seconds when the link model is used).
  std::vector<double> forward;
  std::vector<double> backward;  // the whole backward, B and W together, as a split runs them
  // The backward in one pass, as schedules that do not split it run it (a split visits each
  // weight node twice, so this is often cheaper); empty means equal to `backward`.
  std::vector<double> fused_backward;
  // Replay cost of a checkpointed forward; empty means equal to `forward`.
  std::vector<double> recompute;
  // Cost of a checkpointed forward itself, which runs without autograd (nothing is saved for
  // the backward, so it is often cheaper than `forward`); empty means equal to `forward`.
  std::vector<double> checkpointed_forward;
  // W's share of the backward where a schedule splits it (B takes the rest); `weight`, when
  // given, is W's cost per stage instead.
  double weight_fraction = 0.5;
  std::vector<double> weight;
  LinkModel link;
};

// One compute action of a simulated step, timed in the costs' unit.
struct SimulatedEvent {
  int64_t device = 0;
  std::string name;  // "F3", "B3", "W3", "R3"
  int64_t microbatch = 0;
  int64_t virtual_stage = 0;
  double start = 0;
  double duration = 0;
};

struct SimulationResult {
  double step_time = 0;
  double bubble_fraction = 0;
  std::vector<double> busy_per_device;           // per device
  std::vector<double> peak_inflight_per_device;  // per device, as peak_inflight()
  std::vector<SimulatedEvent> events;            // the compute actions
};

// Simulates `schedule`, lowering it with `checkpoint` first unless it is already lowered.
// Throws ConfigError when the costs do not fit the schedule's virtual stages, are negative or
// not finite, or the schedule is invalid.
SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs,
                          Checkpoint checkpoint = Checkpoint::kNever);

// The schedule at unit costs (F = B = W = 1; a B that includes its W takes 2), one row per
// device of 3-character cells: "F3", "B3", "W3", "R3", "." idle; lower case for a device's
// second virtual stage. This is what the schedule headers draw.
std::vector<std::string> draw_schedule(const Schedule& schedule,
                                       Checkpoint checkpoint = Checkpoint::kNever);

// The bubble fraction the schedule's paper or construction predicts for equal devices, where
// F, B and W are one device's forward, input-gradient and weight-gradient time per micro-batch
// (all its virtual stages; B + W is the whole backward): idle time t over M(F+B+W) + t, with t
//   gpipe, 1f1b                 (K-1)(F+B+W)
//   interleaved-1f1b            (K-1)(F+B+W)/v
//   looped-bfs                  (K-1)(F+B+W)/v          (M >= K)
//   zb-h1                       (K-1)(F+B-W)
//   zb-h2                       (K-1) max(F, F+B-2W)    (a step that ends together)
//   dualpipev                   (K-1)(F&B + B' - 3W')   DeepSeek's, per half-stage chunk: F&B the
//                               paired forward and backward (run in turn here: (F+B+W)/2),
//                               B' = (B+W)/2, W' = W/2
//   v-half                      (K-1)(F+B) - W/2        (the last micro-batch's path)
// zbv has none (its order is a list scheduler's): nullopt.
std::optional<double> bubble_formula(ScheduleKind kind, int64_t K, int64_t M, int64_t v, double F,
                                     double B, double W);

// Per-stage sums of per-layer costs under `balance`.
std::vector<double> sum_by_stage(const std::vector<double>& layer_costs,
                                 const std::vector<int64_t>& balance);

nlohmann::json to_json(const SimulationResult& result);

}  // namespace gpipe
