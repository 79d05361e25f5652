// Planning a training run from its flags: what gpipe_plan and `gpipe_train --plan auto` share.
//
// Why this file exists: both programs read the trainer's own flags (model, batch, optimizer,
// devices, --memory-per-device), turn them into a planner request and a cost book; one place
// keeps the two in step. The trainer then takes the chosen plan's shape as its own, and
// gpipe_plan prints that shape's flags (to_flags), so both run the same pipeline.
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

// The message when no plan fits: the smallest budget that would, and the plan that needs it.
std::string nothing_fits(const plan::SearchResult& result, const plan::PlanRequest& request);

}  // namespace gpipe::train
