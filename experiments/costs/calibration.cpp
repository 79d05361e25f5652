#include "costs/calibration.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "common/pipeline_shape.h"
#include "costs/measured_step.h"
#include "costs/projection.h"
#include "gpipe/errors.h"
#include "gpipe/run_parallel.h"
#include "gpipe/timing.h"

namespace gpipe::costs {

std::string CalibrationKey::name() const {
  return c10::str(microbatch, "x", threads, "x", K, "x", M, "x", replicas,
                  checkpoint == Checkpoint::kNever ? "" : "/" + to_string(checkpoint));
}

CalibrationKey CalibrationKey::parse(const std::string& name) {
  std::vector<int64_t> v;
  const auto slash = name.find('/');
  std::istringstream parts(name.substr(0, slash));
  for (std::string part; std::getline(parts, part, 'x');) {
    const bool digits =
        !part.empty() && part.size() <= 9 && std::all_of(part.begin(), part.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        });
    v.push_back(digits ? std::stoll(part) : 0);
  }
  const bool positive = std::all_of(v.begin(), v.end(), [](int64_t x) { return x >= 1; });
  GPIPE_CHECK(v.size() == 5 && positive, ConfigError,
              "a calibration is named micro-batch x threads x K x M x R[/checkpoint], each >= 1, "
              "got '",
              name, "'");
  CalibrationKey key;
  key.microbatch = v[0];
  key.threads = static_cast<int>(v[1]);
  key.K = v[2];
  key.M = v[3];
  key.replicas = v[4];
  if (slash != std::string::npos) key.checkpoint = parse_checkpoint(name.substr(slash + 1));
  return key;
}

CalibrationStep measure_calibration(const models::ModelBuilder& builder, const LayerCosts& costs,
                                    const CalibrationKey& key,
                                    const Pipeline::OptimizerFactory& optimizer,
                                    const CalibrationOptions& options) {
  const auto& devices = options.devices();
  GPIPE_CHECK(devices.empty() || static_cast<int64_t>(devices.size()) >= key.K * key.replicas,
              ConfigError, "calibrating ", key.replicas, " replica(s) of ", key.K,
              " device(s) needs ", key.K * key.replicas, " devices, got ", devices.size());
  spdlog::info("calibrating: {} GPipe step(s), K={} M={} {} at micro-batch {}, {} thread(s)",
               key.replicas, key.K, key.M, to_string(key.checkpoint), key.microbatch, key.threads);
  CalibrationStep out;
  const auto balance = balance_by_time(costs, key.K);
  out.projected_ms =
      project_step(costs, key.K, key.M, key.checkpoint, link_preset("none"), balance).step_ms;
  const int steps =
      options.steps() > 0 ? options.steps() : steps_lasting(kCalibrationMs, out.projected_ms, 1);
  const auto batch = builder.sample_batch(key.microbatch * key.M, options.seed() + 1);
  // The replicas run at once, each on its own K devices, as data-parallel replicas share the
  // machine; the slowest sets the step.
  std::vector<double> measured(key.replicas, 0.0);
  run_parallel(key.replicas, [&](int64_t r) {
    PipelineShape shape;
    shape.balance = balance;
    shape.M = key.M;
    shape.checkpoint = key.checkpoint;
    shape.threads = key.threads;
    shape.precision = options.precision();
    for (int64_t k = r * key.K; k < (r + 1) * key.K; ++k)
      shape.devices.push_back(devices.empty() ? "cpu:" + std::to_string(k) : devices[k]);
    measured[r] =
        measure_training(builder, batch, shape, optimizer, options.warmup(), steps, options.seed())
            .median_step_ms;
  });
  out.measured_ms = *std::max_element(measured.begin(), measured.end());
  return out;
}

const std::vector<double>& Calibrations::rounds(const std::string& name) const {
  static const std::vector<double> kNone;
  const auto found = rounds_.find(name);
  return found == rounds_.end() ? kNone : found->second;
}

double Calibrations::median(const std::string& name) const {
  GPIPE_CHECK(has(name), ConfigError, "the calibration ", name, " has not been measured");
  return gpipe::median(rounds(name));
}

double Calibrations::spread(const std::string& name) const {
  const auto& r = rounds(name);
  if (r.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  return *hi / *lo - 1;
}

void Calibrations::add(const std::string& name, double ratio) {
  GPIPE_CHECK(ratio > 0 && std::isfinite(ratio), ConfigError, "the calibration ", name,
              " must be finite and > 0, got ", ratio);
  rounds_[name].push_back(ratio);
}

int64_t Calibrations::measure_in_rounds(const std::vector<std::string>& names, int rounds,
                                        int extra_rounds, double unsettled,
                                        const std::function<double(const std::string&)>& measure) {
  GPIPE_CHECK(rounds >= 1 && extra_rounds >= 0, ConfigError,
              "calibration rounds must be >= 1 and extra rounds >= 0, got ", rounds, " and ",
              extra_rounds);
  int64_t made = 0;
  for (int round = 1; round <= rounds + extra_rounds; ++round) {
    for (const auto& name : names) {
      if (static_cast<int>(this->rounds(name).size()) >= round) continue;
      const bool extra = round > rounds;
      if (extra && spread(name) <= unsettled) continue;
      if (extra) {
        spdlog::info("calibration round {} (extra, its rounds spread {:.0f}%): {}", round,
                     100 * spread(name), name);
      } else {
        spdlog::info("calibration round {} of {}: {}", round, rounds, name);
      }
      add(name, measure(name));
      ++made;
    }
  }
  return made;
}

nlohmann::json Calibrations::to_json() const {
  return rounds_;
}

Calibrations Calibrations::from_json(const nlohmann::json& json) {
  Calibrations out;
  for (const auto& [name, value] : json.items()) {
    out.rounds_[name] = value.is_number() ? std::vector<double>{value.get<double>()}
                                          : value.get<std::vector<double>>();
  }
  return out;
}

}  // namespace gpipe::costs
