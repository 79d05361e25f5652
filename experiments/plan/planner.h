// The planner: the fastest pipeline configuration that fits each device's memory.
//
// Why this file exists: a pipeline user must choose K, the data-parallel width R, the
// micro-batches M, the schedule and its virtual stages v, re-materialisation, the balance and the
// threads of each device, and a wrong choice costs 2x or runs out of memory. The planner decides
// from measurements instead of rules of thumb:
//
//   costs     CostBook: every layer's time and bytes at each micro-batch size and thread count
//             (costs/layer_costs.h), cached
//   time      the discrete-event simulator over the schedule the executor runs (simulator.h),
//             plus the slowest device's optimizer update and, with R > 1, the all-reduce of
//             its gradients, timed here (CostBook::allreduce_ms) or a ring at a given bandwidth
//             (2 (R-1)/R x bytes / bandwidth), not overlapped: on a CPU the summing thread
//             takes cores the backward would use; every compute cost is scaled by a
//             calibration (costs/calibration.h: R real steps of K devices at once, at the plan's
//             micro-batch, of the plan's schedule family, over simulated), in rounds for the
//             contenders; costs/projection.h's project() does the arithmetic
//   memory    the replay of each device's lowered action list (costs/memory.h)
//   balance   for each shape, exact min-max partitions of the layers by time, by memory and by
//             blends of the two; the fastest that fits wins
//
// Plans whose predicted peak exceeds the budget are never ranked.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "common/pipeline_shape.h"
#include "costs/projection.h"
#include "gpipe/schedule.h"
#include "gpipe/stage.h"
#include "plan/cost_book.h"

namespace gpipe::plan {

struct Plan {
  // The configuration, run as it is: v is the schedule's, stage_balance holds K x v entries
  // (model order) and balance their sums per device; devices are the request's first K.
  PipelineShape shape;
  double pipeline_ms = 0;   // the simulated schedule
  double update_ms = 0;     // the slowest device's optimizer step
  double allreduce_ms = 0;  // gradient all-reduce over R replicas
  double step_ms = 0;
  double bubble_fraction = 0;
  double samples_per_s = 0;
  double calibration = 1;          // the compute scale the prediction used (costs/calibration.h)
  std::vector<double> peak_bytes;  // predicted, per device
  // Filled by add_measurement (verify and verify_in_processes call it), once per round: the step
  // time is the median of every round's timed steps, the peak the largest any round saw.
  std::optional<double> measured_step_ms;
  std::vector<double> measured_steps_ms;  // every timed step of every round
  std::vector<double> measured_round_ms;  // each round's median step
  // With a paired check (gpipe_plan --verify-paired): each round's prediction from a calibration
  // measured right before that round's steps, so prediction and measurement share its minute.
  std::vector<double> paired_round_ms;
  std::vector<int64_t> measured_peak_bytes;

  double max_peak_bytes() const;
};

struct PlanRequest {
  int64_t batch = 64;  // N over all replicas
  int64_t cores = 1;   // CPU cores to spread devices and threads over
  // Accelerator devices (cuda:0, ...); empty: the devices are `cores` CPU cores.
  std::vector<std::string> devices;
  double memory_per_device = 0;  // bytes; 0: no limit
  std::string link = "none";     // simulator.h link preset between stages
  // Bandwidth of the gradient all-reduce between replicas, GB/s (a ring: 2 (R-1)/R x bytes over
  // it); 0: timed on this machine (CostBook::allreduce_ms).
  double allreduce_gbs = 0;
  int64_t max_chunks = 32;
  int64_t max_replicas = 0;  // 0: as many as the devices allow
  // Measurements of each contending plan's calibration (CostBook::calibrate_in_rounds): after a
  // first search, the calibrations of the plans predicted within 1.25x of the fastest (at most
  // 6 calibrations, the fastest plans' first) are measured in rounds, all in turn, and the search
  // repeated on their medians, again while the winner's calibration lacks rounds (4 passes at
  // most). 1: one measurement each.
  int calibration_rounds = 3;
  // Then, for the calibrations of the plans now within 1.10x of the fastest (at most 3), up to
  // this many rounds more while their rounds spread over 10% (slowest over fastest;
  // CostBook::calibrate_in_rounds), and the search repeated again. Off by default: an A/B of
  // 0 and 2 showed no gain that drift does not swamp (docs/design.md, "Drift needs rounds").
  int calibration_extra_rounds = 0;
  // Only this schedule (gpipe_plan --schedule): its kind, or a schedule file's program, which
  // also fixes K and M. Unset: every schedule.
  std::optional<PipelineShape> schedule;
};

// Every shape the search considers for a model of `num_layers` layers.
std::vector<PipelineShape> candidate_shapes(const PlanRequest& request, int64_t num_layers);

// The calibration (CostBook::calibration_key) a plan of `shape` is predicted with: its
// micro-batch, threads, K, M, R, re-materialisation and schedule family.
costs::CalibrationKey calibration_key(const CostBook& book, const PlanRequest& request,
                                      const PipelineShape& shape);

// `shape` with the given stage balance, predicted.
Plan predict(CostBook& book, const PlanRequest& request, const PipelineShape& shape,
             const std::vector<int64_t>& stage_balance);
// The same with its compute scaled by `slowdown` instead of the book's calibration.
Plan predict(CostBook& book, const PlanRequest& request, const PipelineShape& shape,
             const std::vector<int64_t>& stage_balance, double slowdown);
// `shape` with its best balance: the fastest that fits, or the smallest peak when none fits.
Plan predict(CostBook& book, const PlanRequest& request, const PipelineShape& shape);
// The projection `plan` was predicted from, with its step split into shares (StepShares).
costs::StepProjection explain(CostBook& book, const PlanRequest& request, const Plan& plan);

struct SearchResult {
  std::vector<Plan> ranked;      // plans that fit, fastest first
  int64_t considered = 0;        // shapes predicted
  std::optional<Plan> smallest;  // the plan with the smallest peak, fitting or not
};
SearchResult search(CostBook& book, const PlanRequest& request);

// Adds one measuring round of `plan` (its timed steps in milliseconds and its peak bytes per
// device). Measuring every plan in turn, round after round, lets a drifting machine's slow minutes
// fall on all of them alike rather than on whichever ran then.
void add_measurement(Plan& plan, const std::vector<double>& steps_ms,
                     const std::vector<int64_t>& peak_bytes);

// Runs `plan` (R = 1 only) in this process for `warmup` + `steps` training steps on a synthetic
// batch and adds them as one round (add_measurement).
void verify(Plan& plan, CostBook& book, const PlanRequest& request, int warmup = 2, int steps = 5);

nlohmann::json to_json(const Plan& plan, const PlanRequest& request);

}  // namespace gpipe::plan
