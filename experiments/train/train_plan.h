// Planning a training run from its flags: what gpipe_plan and `gpipe_train --plan auto` share.
//
// Why this file exists: both programs read the trainer's own flags (model, batch, optimizer,
// devices, --memory-per-device), turn them into a planner request and a cost book, and, for
// the trainer, write the chosen plan back into the pipeline flags; one place keeps the two in
// step, so a plan's printed command runs exactly what `--plan auto` would.
#pragma once

#include <string>

#include "plan/planner.h"
#include "train/train_options.h"

namespace gpipe::train {

// Batch, memory budget and devices: --devices N (or empty: this machine's cores) plans over CPU
// cores; a list of cuda devices plans over those. Throws ConfigError for a bad budget.
plan::PlanRequest plan_request(const TrainOptions& options);

// The model and the trainer's optimizer, measured on the request's devices (`cache`: a JSON file
// of earlier measurements, or empty).
plan::CostBook cost_book(const TrainOptions& options, const plan::PlanRequest& request,
                         const std::string& cache);

// Sets the pipeline flags of `options` to `plan` (K, balance, M, schedule, v, checkpoint,
// threads, devices).
void apply_plan(const plan::Plan& plan, const plan::PlanRequest& request, TrainOptions& options);

// The message when no plan fits: the smallest budget that would, and the plan that needs it.
std::string nothing_fits(const plan::SearchResult& result, const plan::PlanRequest& request);

}  // namespace gpipe::train
