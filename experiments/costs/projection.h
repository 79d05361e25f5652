// A pipeline step projected from per-layer costs: the layers cut into stages, priced, simulated.
//
// Why this file exists: Tables 2 and 3 need throughput on K = 2, 4, 8 devices, and a 2-core
// machine has only two; the planner needs the step time of configurations it will not run. Both
// sum each stage's layer costs (layer_costs.h) measured at the real micro-batch size, add the
// loss to the last stage and a link model between stages, and run the discrete-event simulator
// on the schedule. The partition is the one a measured run uses, so a measured and a projected
// figure describe the same pipeline.
#pragma once

#include <cstdint>
#include <vector>

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
// recomputed, the backward and its weight-gradient part W, summed over each stage's layers (a
// kind not profiled is priced as the kept forward); the last stage adds the loss to each forward.
SimulationCosts stage_costs_ms(const LayerCosts& costs, const std::vector<int64_t>& balance,
                               const LinkModel& link_seconds);

struct Projection {
  std::vector<int64_t> balance;
  double pipeline_ms = 0;  // the simulated forward/backward schedule
  double update_ms = 0;    // the slowest stage's optimizer update, after the schedule
  double step_ms = 0;      // pipeline_ms + update_ms
  double bubble_fraction = 0;
};

// The GPipe step of `costs` (measured at micro-batch N/M) on K devices with M micro-batches,
// `checkpoint` re-materialisation and `link_seconds` between stages (link_preset). The balance is
// balance_by_time(costs, K) unless `balance` is given.
Projection project_step(const LayerCosts& costs, int64_t K, int64_t M, Checkpoint checkpoint,
                        const LinkModel& link_seconds, std::vector<int64_t> balance = {});

// N samples per step of `step_ms`.
double samples_per_second(int64_t batch, double step_ms);

}  // namespace gpipe::costs
