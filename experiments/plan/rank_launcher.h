// Runs a plan that needs several processes: K stages x R replicas of gpipe_train on this host.
//
// Why this file exists: a data-parallel plan (R > 1) cannot be measured inside the planner's own
// process, since its replicas meet over c10d. To verify such a plan, the planner starts its
// ready command line the way scripts/launch.sh would (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, as torchrun sets them), each
// rank's output in its own log, waits for every rank, and reads rank 0's summary.json: the step
// times and the per-stage peaks that rank gathers from the others.
#pragma once

#include <string>
#include <vector>

#include "plan/planner.h"

namespace gpipe::plan {

// Starts `world` copies of `program args...` with torchrun's environment and waits for all of
// them; each rank's stdout and stderr go to `log_dir`/rank<i>.log. Throws gpipe::Error naming the
// first rank that failed (its exit status or signal) with the last lines of its log.
void run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
               const std::string& log_dir);

// Verifies `plan` (any R) by running gpipe_train (`train_program`) with `train_args` (the model
// and training flags, without the plan's own: those come from to_flags(plan.shape)) plus
// --distributed, for `warmup` + `steps` steps, as K x R processes, and adds the timed steps and the
// per-stage peaks as one round (add_measurement).
void verify_in_processes(Plan& plan, const std::string& train_program,
                         const std::vector<std::string>& train_args, int warmup = 2, int steps = 5);

}  // namespace gpipe::plan
