// A pipeline step projected from per-layer costs: the layers cut into stages, priced, simulated.
//
// Why this file exists: Tables 2 and 3 need throughput on K = 2, 4, 8 devices, and a 2-core
// machine has only two; the planner needs the step time of configurations it will not run; a
// calibration compares a measured step with its projection. All of them sum each stage's layer
// costs (layer_costs.h) measured at the real micro-batch size, add the loss to the last stage and
// a link model between stages, run the discrete-event simulator on the shape's schedule and add
// the slowest device's optimizer update and, with R replicas, the gradient all-reduce. `project`
// is the one function that does it: no other code builds a step from costs. The partition is the
// one a measured run uses, so a measured and a projected figure describe the same pipeline.
#pragma once

#include <torch/arg.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/pipeline_shape.h"
#include "costs/layer_costs.h"
#include "gpipe/link.h"
#include "gpipe/schedule.h"
#include "gpipe/simulator.h"

namespace gpipe::costs {

// A link model in the costs' unit (ms): latency in ms, bandwidth in bytes per ms, and the bytes
// crossing each of the stage boundaries of `balance` per micro-batch.
LinkModel link_in_ms(const LinkModel& link_seconds, const LayerCosts& costs,
                     const std::vector<int64_t>& balance);

// Per-stage simulator costs of `balance`: the forward as kept, checkpointed (no autograd) and
// recomputed, the backward in one pass and split into B and its weight-gradient part W, summed
// over each stage's layers (a kind not profiled is priced as the kept forward); the last stage
// adds the loss to each forward.
SimulationCosts stage_costs_ms(const LayerCosts& costs, const std::vector<int64_t>& balance,
                               const LinkModel& link_seconds);

// Where a step's device-time (K devices x the step) goes, as fractions that sum to 1:
//
//   forward, backward (B and W), recompute, optimizer   the work each device did
//   communication = K x (step with the link - step without it), plus K x the all-reduce
//   bubble        = idle time of the schedule if every stage cost the stages' mean (the
//                   fill-and-drain of a perfectly balanced pipeline)
//   imbalance     = the rest of the idle time: what the uneven stages and updates add
struct StepShares {
  double forward = 0;
  double backward = 0;
  double recompute = 0;
  double bubble = 0;
  double imbalance = 0;
  double communication = 0;
  double optimizer = 0;

  double sum() const;
  // The largest of recompute, bubble, imbalance, communication and optimizer, by name.
  std::string largest_overhead() const;
};

// The seven shares, in the order reports list them: pointers into `shares` (to const for a
// const one), so that one list serves summing, scaling and printing them.
template <typename Shares>
auto share_slots(Shares& shares) {
  return std::array{&shares.forward,   &shares.backward,      &shares.recompute, &shares.bubble,
                    &shares.imbalance, &shares.communication, &shares.optimizer};
}

// The share an action's time goes to: forward (F), recompute (R), or backward (B and W).
double& work_slot(StepShares& shares, const std::string& action);

// The time to all-reduce `bytes` of gradients across the replicas, in ms.
using AllReduceTime = std::function<double(double bytes)>;

struct ProjectionOptions {
  // Every compute time (each kind of forward and backward, the loss and the update) times this
  // (calibration.h); the link and the all-reduce are not scaled.
  TORCH_ARG(double, calibration) = 1;
  // Also split the step into StepShares (two more simulations).
  TORCH_ARG(bool, breakdown) = false;
  // With R > 1: the all-reduce of the largest device's parameters. Required when R > 1.
  TORCH_ARG(AllReduceTime, allreduce_ms);
};

struct StepProjection {
  std::vector<int64_t> stage_balance;  // layers per virtual stage (K x v), as projected
  double pipeline_ms = 0;              // the simulated schedule
  double update_ms = 0;                // the slowest device's optimizer update, after it
  double allreduce_ms = 0;             // the gradient all-reduce over R replicas
  double step_ms = 0;                  // pipeline_ms + allreduce_ms + update_ms
  double bubble_fraction = 0;
  std::optional<StepShares> shares;  // with ProjectionOptions::breakdown
};

// The step of `shape` (its schedule, v or schedule file, K, M, checkpoint and R) over `costs`
// measured at the shape's micro-batch, with `link_seconds` between stages (link_preset). The
// layers are cut by the shape's balance (PipelineShape::stage_balance), else by time
// (balance_by_time over K x v stages). The all-reduce (R > 1) is of the largest device's
// parameters. Throws ConfigError when the shape's precision is not the
// costs' (sizes and times are of one compute dtype), a balance does not fit the schedule, or R > 1
// comes without an all-reduce time.
StepProjection project(const PipelineShape& shape, const LayerCosts& costs,
                       const LinkModel& link_seconds, const ProjectionOptions& options = {});

// A GPipe shape of K devices and M micro-batches with `checkpoint`, cut by `balance` (one entry per
// device; empty: by time): the shape tables and calibrations measure and project.
PipelineShape gpipe_shape(int64_t K, int64_t M, Checkpoint checkpoint,
                          std::vector<int64_t> balance = {});

// N samples per step of `step_ms`.
double samples_per_second(int64_t batch, double step_ms);

}  // namespace gpipe::costs
