// Plans as JSON, and measuring them: verify() and add_measurement().
#include <algorithm>

#include "costs/measured_step.h"
#include "gpipe/errors.h"
#include "gpipe/timing.h"
#include "plan/planner.h"

namespace gpipe::plan {

nlohmann::json to_json(const Plan& plan, const PlanRequest& request) {
  const auto& s = plan.shape;
  const double budget = request.memory_per_device;
  nlohmann::json json = {
      {"K", s.K},
      {"R", s.R},
      {"M", s.M},
      {"schedule", s.schedule_name()},
      {"v", s.v},
      {"checkpoint", to_string(s.checkpoint)},
      {"balance", s.device_balance()},
      {"stage_balance", s.stage_balance()},
      {"threads", s.threads},
      {"precision", to_string(s.precision)},
      {"predicted_samples_per_s", plan.samples_per_s},
      {"predicted_step_ms", plan.step_ms},
      {"predicted_pipeline_ms", plan.pipeline_ms},
      {"predicted_update_ms", plan.update_ms},
      {"predicted_allreduce_ms", plan.allreduce_ms},
      {"predicted_bubble_fraction", plan.bubble_fraction},
      {"predicted_peak_bytes_per_device", plan.peak_bytes},
      {"headroom_bytes",
       budget > 0 ? nlohmann::json(budget - plan.max_peak_bytes()) : nlohmann::json(nullptr)}};
  if (plan.measured_step_ms) {
    json["measured_step_ms"] = *plan.measured_step_ms;
    json["measured_round_ms"] = plan.measured_round_ms;
    if (!plan.paired_round_ms.empty()) json["paired_predicted_round_ms"] = plan.paired_round_ms;
    json["measured_peak_bytes_per_device"] = plan.measured_peak_bytes;
  }
  return json;
}

void verify(Plan& plan, CostBook& book, const PlanRequest& request, int warmup, int steps) {
  GPIPE_CHECK(plan.shape.R == 1, ConfigError, "verifying ", plan.shape.describe(),
              " in this process needs one replica, not ", plan.shape.R,
              ": verify_in_processes (plan/rank_launcher.h) runs it");
  const auto builder = models::make_model(book.model());
  const auto batch = builder->sample_batch(request.batch, book.seed() + 1);
  const auto measured = costs::measure_training(*builder, batch, plan.shape, book.optimizer(),
                                                warmup, steps, book.seed());
  add_measurement(plan, measured.step_ms, measured.peak_bytes);
}

void add_measurement(Plan& plan, const std::vector<double>& steps_ms,
                     const std::vector<int64_t>& peak_bytes) {
  GPIPE_CHECK(!steps_ms.empty(), Error, "measuring ", plan.shape.describe(), " timed no step");
  plan.measured_steps_ms.insert(plan.measured_steps_ms.end(), steps_ms.begin(), steps_ms.end());
  plan.measured_round_ms.push_back(median(steps_ms));
  plan.measured_step_ms = median(plan.measured_steps_ms);
  plan.measured_peak_bytes.resize(std::max(plan.measured_peak_bytes.size(), peak_bytes.size()));
  for (size_t d = 0; d < peak_bytes.size(); ++d)
    plan.measured_peak_bytes[d] = std::max(plan.measured_peak_bytes[d], peak_bytes[d]);
}

}  // namespace gpipe::plan
