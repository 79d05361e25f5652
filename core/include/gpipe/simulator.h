// Discrete-event simulation of a pipeline schedule from costs.
//
// Why this file exists: it predicts what the executor will do — step time, bubble, memory in
// flight — from per-stage costs alone, and projects a measured single-machine profile onto K
// devices that are not there. It reads the same Schedule the executor runs and follows the
// executor's rules: a stage runs its actions in list order; F(m) waits for micro-batch m's
// activations from the stage before; a checkpointed B(m) first replays the forward (R(m))
// without waiting, then waits for the gradient from the stage after; a send does not block the
// sender, and a link carries one message per direction at a time (latency + bytes / bandwidth).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "gpipe/schedule.h"
#include "gpipe/stage.h"
#include "gpipe/timeline.h"

namespace gpipe {

// The copy between adjacent stages.
struct LinkModel {
  double latency_s = 0;          // per message
  double bandwidth_bytes_s = 0;  // 0 means infinite
  // Bytes crossing boundary s -> s+1 per micro-batch (K-1 entries; the gradient going back has
  // the same size). Empty means nothing to copy.
  std::vector<double> boundary_bytes;

  double transfer_s(int64_t boundary) const;
};

// Documented link presets for projections (bandwidth per direction, latency per message):
//   pcie    PCIe 3.0 x16 between GPUs without NVLink, as in GPipe's Table 3: 12 GB/s, 10 us
//   nvlink  NVLink 2 (two bricks between neighbouring V100s): 50 GB/s, 5 us
//   tpu     TPU v3 inter-core interconnect: 70 GB/s, 2 us
//   none    no copy cost (stages share memory, as CPU virtual devices do)
LinkModel link_preset(const std::string& name);

struct SimulationCosts {
  // Per stage, per micro-batch, in any time unit (seconds when the link model is used).
  std::vector<double> forward;
  std::vector<double> backward;
  // Replay cost of a checkpointed forward; empty means equal to `forward`.
  std::vector<double> recompute;
  LinkModel link;
};

struct SimulationResult {
  double step_time = 0;
  double bubble_fraction = 0;
  std::vector<double> busy_per_stage;
  std::vector<int64_t> peak_inflight_per_stage;
  std::vector<TimelineEvent> events;  // start/duration in the costs' unit
};

// Throws ConfigError when the costs do not fit the schedule's K, are negative or not finite,
// or the schedule is invalid.
SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs,
                          Checkpoint checkpoint = Checkpoint::kNever);

// Per-stage sums of per-layer costs under `balance`.
std::vector<double> sum_by_stage(const std::vector<double>& layer_costs,
                                 const std::vector<int64_t>& balance);

nlohmann::json to_json(const SimulationResult& result);

}  // namespace gpipe
