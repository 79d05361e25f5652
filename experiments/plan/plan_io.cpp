// Plans as text: describe/parse a shape, the gpipe_train flags and JSON of a plan, and verify().
#include <algorithm>
#include <sstream>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/timing.h"
#include "plan/planner.h"
#include "tables/workload.h"

namespace gpipe::plan {
namespace {

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t v : values)
    out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

int64_t parse_positive(const std::string& key, const std::string& value) {
  const auto numbers = cli::parse_ints(value, key);
  GPIPE_CHECK(numbers.size() == 1 && numbers[0] >= 1, ConfigError, "plan key ", key,
              " needs one integer >= 1, got '", value, "'");
  return numbers[0];
}

}  // namespace

std::string PlanShape::describe() const {
  std::ostringstream out;
  out << "K=" << K << ",R=" << R << ",M=" << M << ",schedule=" << to_string(schedule) << ",v=" << v
      << ",checkpoint=" << to_string(checkpoint) << ",threads=" << threads;
  return out.str();
}

PlanShape parse_plan_shape(const std::string& text) {
  PlanShape shape;
  bool v_given = false;
  for (const auto& item : cli::parse_strings(text)) {
    const auto eq = item.find('=');
    GPIPE_CHECK(eq != std::string::npos, ConfigError, "plan item '", item,
                "' is not key=value (keys: K, R, M, schedule, v, checkpoint, threads)");
    const auto key = item.substr(0, eq);
    const auto value = item.substr(eq + 1);
    if (key == "K") {
      shape.K = parse_positive(key, value);
    } else if (key == "R") {
      shape.R = parse_positive(key, value);
    } else if (key == "M") {
      shape.M = parse_positive(key, value);
    } else if (key == "v") {
      shape.v = parse_positive(key, value);
      v_given = true;
    } else if (key == "threads") {
      shape.threads = static_cast<int>(parse_positive(key, value));
    } else if (key == "schedule") {
      shape.schedule = parse_schedule_kind(value);
    } else if (key == "checkpoint") {
      shape.checkpoint = parse_checkpoint(value);
    } else {
      throw ConfigError("unknown plan key '" + key + "' in '" + text +
                        "': expected K, R, M, schedule, v, checkpoint, threads");
    }
  }
  if (!v_given) shape.v = default_virtual_stages(shape.schedule);
  check_virtual_stages(shape.schedule, shape.v);
  return shape;
}

std::vector<std::string> train_flags(const Plan& plan, const PlanRequest& request) {
  const auto& s = plan.shape;
  std::vector<std::string> flags = {"--partitions", std::to_string(s.K)};
  if (s.v > 1) {
    flags.insert(flags.end(), {"--stage-balance", join(plan.stage_balance)});
  } else {
    flags.insert(flags.end(), {"--balance", join(plan.balance)});
  }
  flags.insert(flags.end(),
               {"--chunks", std::to_string(s.M), "--schedule", to_string(s.schedule),
                "--virtual-stages", std::to_string(s.v), "--checkpoint", to_string(s.checkpoint),
                "--threads-per-device", std::to_string(s.threads)});
  if (!request.devices.empty()) {
    std::string devices;
    for (int64_t d = 0; d < s.K; ++d)
      devices += (d == 0 ? "" : ",") + request.devices[d];
    flags.insert(flags.end(), {"--devices", devices});
  }
  return flags;
}

nlohmann::json to_json(const Plan& plan, const PlanRequest& request) {
  const auto& s = plan.shape;
  const double budget = request.memory_per_device;
  nlohmann::json json = {
      {"K", s.K},
      {"R", s.R},
      {"M", s.M},
      {"schedule", to_string(s.schedule)},
      {"v", s.v},
      {"checkpoint", to_string(s.checkpoint)},
      {"balance", plan.balance},
      {"stage_balance", plan.stage_balance},
      {"threads", s.threads},
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
  tables::RunShape shape;
  shape.balance = plan.balance;
  for (int64_t d = 0; d < plan.shape.K && !request.devices.empty(); ++d)
    shape.devices.push_back(request.devices[d]);
  shape.chunks = plan.shape.M;
  shape.checkpoint = plan.shape.checkpoint;
  shape.threads_per_device = plan.shape.threads;
  shape.schedule = plan.shape.schedule;
  shape.virtual_stages = plan.shape.v;
  if (plan.shape.v > 1) shape.stage_balance = plan.stage_balance;
  const auto measured = tables::measure_training(*builder, batch, shape, book.optimizer(), warmup,
                                                 steps, book.seed());
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
