#include "costs/calibration.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "common/pipeline_shape.h"
#include "costs/measured_step.h"
#include "costs/projection.h"
#include "gpipe/errors.h"
#include "gpipe/run_parallel.h"
#include "gpipe/timing.h"

namespace gpipe::costs {

std::string to_string(ScheduleFamily family) {
  switch (family) {
    case ScheduleFamily::kFused:
      return "fused";
    case ScheduleFamily::kSplit:
      return "split";
    case ScheduleFamily::kV:
      return "v";
  }
  return "?";
}

namespace {

ScheduleFamily parse_family(const std::string& text) {
  for (auto family : {ScheduleFamily::kFused, ScheduleFamily::kSplit, ScheduleFamily::kV}) {
    if (to_string(family) == text) return family;
  }
  throw ConfigError(c10::str("unknown schedule family '", text, "'; expected fused, split or v"));
}

auto tied(const CalibrationKey& k) {
  return std::tie(k.microbatch, k.threads, k.K, k.M, k.replicas, k.checkpoint, k.family);
}

}  // namespace

ScheduleFamily schedule_family(const Schedule& schedule) {
  const int64_t K = schedule.devices;
  if (K <= 1) return ScheduleFamily::kFused;
  if (schedule.num_stages() > K && schedule.device_of(K) == schedule.device_of(K - 1))
    return ScheduleFamily::kV;
  return schedule.splits_backward() ? ScheduleFamily::kSplit : ScheduleFamily::kFused;
}

ScheduleKind representative(ScheduleFamily family) {
  switch (family) {
    case ScheduleFamily::kSplit:
      return ScheduleKind::kZBH1;
    case ScheduleFamily::kV:
      return ScheduleKind::kZBV;
    case ScheduleFamily::kFused:
      break;
  }
  return ScheduleKind::kGPipe;
}

PipelineShape CalibrationKey::shape() const {
  PipelineShape shape;
  shape.K = K;
  shape.M = M;
  shape.schedule = representative(family);
  shape.v = default_virtual_stages(shape.schedule);
  shape.checkpoint = checkpoint;
  shape.threads = threads;
  return shape;
}

CalibrationKey CalibrationKey::screening() const {
  CalibrationKey out = *this;
  out.checkpoint = Checkpoint::kNever;
  out.family = ScheduleFamily::kFused;
  return out;
}

std::string CalibrationKey::describe() const {
  return c10::str("micro-batch ", microbatch, ", ", threads, threads == 1 ? " thread" : " threads",
                  ", K=", K, " M=", M, " R=", replicas, ", ", to_string(checkpoint), ", ",
                  to_string(family));
}

bool CalibrationKey::operator<(const CalibrationKey& other) const {
  return tied(*this) < tied(other);
}

bool CalibrationKey::operator==(const CalibrationKey& other) const {
  return tied(*this) == tied(other);
}

void to_json(nlohmann::json& json, const CalibrationKey& key) {
  json = {{"microbatch", key.microbatch},
          {"threads", key.threads},
          {"K", key.K},
          {"M", key.M},
          {"replicas", key.replicas},
          {"checkpoint", to_string(key.checkpoint)},
          {"family", to_string(key.family)}};
}

void from_json(const nlohmann::json& json, CalibrationKey& key) {
  GPIPE_CHECK(json.is_object(), ConfigError, "a calibration key is an object, got ", json.dump());
  const auto count = [&](const char* field) {
    GPIPE_CHECK(json.contains(field) && json.at(field).is_number_integer() &&
                    json.at(field).get<int64_t>() >= 1,
                ConfigError, "a calibration key needs an integer ", field, " >= 1, got ",
                json.dump());
    return json.at(field).get<int64_t>();
  };
  key.microbatch = count("microbatch");
  key.threads = static_cast<int>(count("threads"));
  key.K = count("K");
  key.M = count("M");
  key.replicas = count("replicas");
  key.checkpoint = parse_checkpoint(json.value("checkpoint", std::string("never")));
  key.family = parse_family(json.value("family", std::string("fused")));
}

CalibrationStep measure_calibration(const models::ModelBuilder& builder, const LayerCosts& costs,
                                    const CalibrationKey& key,
                                    const Pipeline::OptimizerFactory& optimizer,
                                    const CalibrationOptions& options) {
  const auto& devices = options.devices();
  GPIPE_CHECK(devices.empty() || static_cast<int64_t>(devices.size()) >= key.K * key.replicas,
              ConfigError, "calibrating ", key.replicas, " replica(s) of ", key.K,
              " device(s) needs ", key.K * key.replicas, " devices, got ", devices.size());
  auto shape = key.shape();
  shape.precision = options.precision();
  spdlog::info("calibrating: {} {} step(s), {}", key.replicas, shape.schedule_name(),
               key.describe());
  CalibrationStep out;
  const auto projection = project(shape, costs, link_preset("none"));
  set_stage_balance(shape, projection.stage_balance);
  out.projected_ms = projection.step_ms;
  const int steps =
      options.steps() > 0 ? options.steps() : steps_lasting(kCalibrationMs, out.projected_ms, 1);
  const auto batch = builder.sample_batch(key.microbatch * key.M, options.seed() + 1);
  // The replicas run at once, each on its own K devices, as data-parallel replicas share the
  // machine; the slowest sets the step.
  std::vector<double> measured(key.replicas, 0.0);
  run_parallel(key.replicas, [&](int64_t r) {
    auto replica = shape;
    for (int64_t k = r * key.K; k < (r + 1) * key.K; ++k)
      replica.devices.push_back(devices.empty() ? "cpu:" + std::to_string(k) : devices[k]);
    measured[r] = measure_training(builder, batch, replica, optimizer, options.warmup(), steps,
                                   options.seed())
                      .median_step_ms;
  });
  out.measured_ms = *std::max_element(measured.begin(), measured.end());
  return out;
}

double contended_calibration(double alone, double together, double bubble, int64_t K) {
  check_ratio("alone", alone);
  check_ratio("together", together);
  GPIPE_CHECK(bubble >= 0 && bubble <= 1 && K >= 1, ConfigError,
              "a contended calibration needs a bubble in [0, 1] and K >= 1, got ", bubble, " and ",
              K);
  if (K == 1) return alone;
  const double k = static_cast<double>(K);
  const double all_busy = std::clamp((k * (1 - bubble) - 1) / (k - 1), 0.0, 1.0);
  return alone + (together - alone) * all_busy;
}

double rounds_spread(const std::vector<double>& rounds) {
  if (rounds.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(rounds.begin(), rounds.end());
  return *hi / *lo - 1;
}

void check_ratio(const std::string& what, double ratio) {
  GPIPE_CHECK(ratio > 0 && std::isfinite(ratio), ConfigError, "the calibration ", what,
              " must be finite and > 0, got ", ratio);
}

void check_rounds(int rounds, int extra_rounds) {
  GPIPE_CHECK(rounds >= 1 && extra_rounds >= 0, ConfigError,
              "calibration rounds must be >= 1 and extra rounds >= 0, got ", rounds, " and ",
              extra_rounds);
}

void log_round(const std::string& what, int round, int rounds, double spread) {
  if (spread >= 0) {
    spdlog::info("calibration round {} (extra, its rounds spread {:.0f}%): {}", round, 100 * spread,
                 what);
  } else {
    spdlog::info("calibration round {} of {}: {}", round, rounds, what);
  }
}

nlohmann::json to_json(const Calibrations<CalibrationKey>& calibrations) {
  auto out = nlohmann::json::array();
  for (const auto& [key, rounds] : calibrations.all())
    out.push_back({{"key", key}, {"rounds", rounds}});
  return out;
}

Calibrations<CalibrationKey> calibrations_from_json(const nlohmann::json& json) {
  GPIPE_CHECK(json.is_array(), ConfigError,
              "calibrations are a list of {key, rounds} (an older cache names them by text); got ",
              json.type_name());
  Calibrations<CalibrationKey> out;
  for (const auto& entry : json) {
    GPIPE_CHECK(entry.is_object() && entry.contains("key") && entry.contains("rounds") &&
                    entry.at("rounds").is_array(),
                ConfigError, "a calibration is {key, rounds}, got ", entry.dump());
    const auto key = entry.at("key").get<CalibrationKey>();
    for (const auto& ratio : entry.at("rounds")) {
      GPIPE_CHECK(ratio.is_number(), ConfigError, "a calibration round is a number, got ",
                  ratio.dump());
      out.add(key, ratio.get<double>());
    }
  }
  return out;
}

}  // namespace gpipe::costs
