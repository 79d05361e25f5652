// Where a pipeline step's time goes: forward, backward, recompute, bubble, load imbalance,
// communication and the optimizer, as fractions of the step's device-time that sum to 1.
//
// Why this file exists: the paper says the bubble is negligible once M >= 4K and that
// re-materialisation is GPipe's main overhead; neither shows in a throughput table. This splits
// K devices x one step into the work each device did (forward, backward with W, recompute, the
// optimizer update) and the time it waited, and splits the waiting three ways by simulating
// the same schedule on the same costs:
//
//   communication = K x (step with the link - step without it)
//   bubble        = idle time of the schedule if every stage cost the stages' mean (the
//                   fill-and-drain of a perfectly balanced pipeline)
//   imbalance     = the rest of the idle time: what the uneven stages and updates add
//
// A simulated breakdown comes from the simulator alone; a measured one takes the work from the
// executor's timeline of a real step and splits its idle time as the simulation splits it.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "costs/projection.h"
#include "gpipe/timeline.h"

namespace gpipe::tables {

struct StepBreakdown {
  std::string model;
  int64_t K = 0;
  int64_t M = 0;
  std::string source;  // "simulated" | "measured"
  double step_ms = 0;
  double forward = 0;
  double backward = 0;  // B and W
  double recompute = 0;
  double bubble = 0;
  double imbalance = 0;
  double communication = 0;
  double optimizer = 0;  // measured: also the step's fan-out and gradient zeroing
  // The scaling table's speedup of the same row (projected for simulated rows), when known.
  std::optional<double> speedup;

  double sum() const;
  // The largest of recompute, bubble, imbalance, communication and optimizer, by name.
  std::string largest_overhead() const;
};

// The step of `schedule` (compute actions; K devices, M micro-batches) over `costs` cut into
// `stage_balance` (one entry per virtual stage), with `checkpoint` and `link_seconds`,
// simulated.
StepBreakdown simulated_breakdown(const costs::LayerCosts& costs, const Schedule& schedule,
                                  Checkpoint checkpoint, const LinkModel& link_seconds,
                                  const std::vector<int64_t>& stage_balance);
// The GPipe step on K devices, M micro-batches and `balance` (one entry per device).
StepBreakdown simulated_breakdown(const costs::LayerCosts& costs, int64_t K, int64_t M,
                                  Checkpoint checkpoint, const LinkModel& link_seconds,
                                  const std::vector<int64_t>& balance);

// A measured step: `events` of one step from the pipeline's timeline (K devices), the step's
// wall time `step_ms`; the idle time is split into bubble, imbalance and communication in the
// proportions of `simulated` (the same K, M, balance and link). Throws ConfigError when the
// events do not cover K devices.
StepBreakdown measured_breakdown(const std::vector<TimelineEvent>& events, double step_ms,
                                 const StepBreakdown& simulated);

nlohmann::json to_json(const StepBreakdown& breakdown);

// The breakdowns of a scaling_table run, as results/step_breakdown.{md,csv,json}. The Markdown
// also tabulates the bubble against M for each K and states the smallest M whose bubble is
// under 5%, beside the paper's M >= 4K.
struct BreakdownReport {
  std::vector<StepBreakdown> rows;
  std::string preset;
  std::string command;
  std::string link;  // of the simulated rows
  std::string checkpoint;
  nlohmann::json machine;
  double seconds = 0;
};

nlohmann::json to_json(const BreakdownReport& report);
std::string to_markdown(const BreakdownReport& report);
std::string to_csv(const BreakdownReport& report);

}  // namespace gpipe::tables
