// Where a pipeline step's time goes, simulated and measured: the shares of costs::StepShares
// (forward, backward, recompute, bubble, load imbalance, communication and the optimizer, as
// fractions of the step's device-time that sum to 1) with the row they describe.
//
// Why this file exists: the paper says the bubble is negligible once M >= 4K and that
// re-materialisation is GPipe's main overhead; neither shows in a throughput table. A simulated
// breakdown is the projection's (costs/projection.h: project with `breakdown`); a measured one
// takes the work from the executor's timeline of a real step and splits its idle time as the
// simulation of the same shape splits it.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "costs/projection.h"
#include "gpipe/timeline.h"

namespace gpipe::tables {

struct StepBreakdown : costs::StepShares {
  std::string model;
  int64_t K = 0;
  int64_t M = 0;
  std::string source;  // "simulated" | "measured"
  double step_ms = 0;
  // The scaling table's speedup of the same row (projected for simulated rows), when known.
  std::optional<double> speedup;
};

// The simulated breakdown of `shape` from its projection (made with ProjectionOptions::breakdown).
// Throws ConfigError when the projection has no shares.
StepBreakdown breakdown_of(const PipelineShape& shape, const costs::StepProjection& projection);

// A measured step: `events` of one step from the pipeline's timeline (K devices), the step's
// wall time `step_ms`; the idle time is split into bubble, imbalance and communication in the
// proportions of `simulated` (the same K, M, balance and link), and the optimizer share also holds
// the step's fan-out and gradient zeroing. Throws ConfigError when the
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
