#include "tables/scaling_run.h"

#include <algorithm>
#include <cmath>

#include "common/report.h"
#include "gpipe/errors.h"
#include "tables/workload.h"

namespace gpipe::tables::scaling {

namespace {

// The calibration step of `model` at M: one device, the model's N in M micro-batches, the
// profiles' threads and the table's re-materialisation.
costs::CalibrationKey one_device_key(const ScalingOptions& options, const ScalingModel& model,
                                     int64_t M) {
  costs::CalibrationKey key;
  key.M = M;
  key.microbatch = model.batch / M;
  key.threads = options.profile.threads();
  key.checkpoint = options.checkpoint;
  return key;
}

// `raw` with the calibration `ratio`.
Profiled with_calibration(const RawProfile& raw, double ratio) {
  return Profiled{raw.costs, raw.other_cores, ratio};
}

// `raw` (profiled at M) scaled by its model's calibration at the M nearest to it by ratio (a tie
// takes the larger M), where the model has one.
Profiled calibrated(const ScalingRun& run, const ModelRun& mr, const RawProfile& raw, int64_t M) {
  const auto found = run.calibration_of.find(model_key(mr.model));
  if (found == run.calibration_of.end()) return with_calibration(raw, 1.0);
  const ModelCalibration* nearest = nullptr;
  double best = 0;
  for (const auto& [at, label] : found->second) {  // ascending M: a tie keeps the later one
    const double distance = std::abs(std::log(static_cast<double>(at) / static_cast<double>(M)));
    if (nearest == nullptr || distance <= best) {
      nearest = &label;
      best = distance;
    }
  }
  return with_calibration(raw, run.calibrations.median(*nearest));
}

// The Ms a model is calibrated at: --calibration-chunks, or the largest M of its rows in any
// table (its smallest micro-batch: where isolated layer timings miss the most).
std::vector<int64_t> calibration_chunks(const ScalingOptions& options, const ScalingModel& model) {
  if (!options.calibration_chunks.empty()) return options.calibration_chunks;
  int64_t M = 1;
  for (const auto& table : options.tables) {
    for (const auto& m : table.models) {
      if (model_key(m) != model_key(model)) continue;
      M = std::max(M, *std::max_element(table.chunks.begin(), table.chunks.end()));
    }
  }
  return {M};
}

// One round of the calibration `key` of `mr` (layer costs `raw` at key.M): a one-device step
// over its projection.
double calibration_round(const ScalingRun& run, const ModelRun& mr,
                         const costs::CalibrationKey& key, const costs::LayerCosts& raw) {
  const auto& options = run.options;
  const auto t0 = std::chrono::steady_clock::now();
  const auto step = costs::measure_calibration(
      *mr.builder, raw, key, make_optimizer(mr.optimizer),
      costs::CalibrationOptions()
          .devices(devices_for(options.device_type, key.K * key.replicas))
          .warmup(options.warmup_steps)
          .steps(options.calibration_steps)
          .precision(options.precision));
  spdlog::info(
      "{}: a one-device step of M={} ({} at once) took {:.1f} ms, its projection {:.1f} ms: "
      "{:.3f} ({:.1f} s)",
      mr.model.label, key.M, key.replicas, step.measured_ms, step.projected_ms, step.ratio(),
      elapsed_s(t0));
  return step.ratio();
}

}  // namespace

const Profiled& profiled_at(ScalingRun& run, const ModelRun& mr, int64_t M) {
  const auto key = costs_key(mr, M);
  if (!run.costs_cache.count(key))
    run.costs_cache[key] = calibrated(run, mr, raw_at(run, mr, M), M);
  return run.costs_cache.at(key);
}

void calibrate_models(ScalingRun& run, const std::vector<std::unique_ptr<ModelRun>>& model_runs) {
  const auto& options = run.options;
  if (!options.calibrate) return;
  std::vector<ModelCalibration> labels;
  std::map<ModelCalibration, const ModelRun*> jobs;
  for (const auto& mr : model_runs) {
    if (!mr->can_measure || run.calibration_of.count(model_key(mr->model))) continue;
    for (const int64_t M : calibration_chunks(options, mr->model)) {
      const ModelCalibration label{mr->model.label, one_device_key(options, mr->model, M)};
      run.calibration_of[model_key(mr->model)][M] = label;
      labels.push_back(label);
      jobs.emplace(label, mr.get());
      raw_at(run, *mr, M);  // profiled first: the rounds interleave only the steps
    }
  }
  run.calibrations.measure_in_rounds(
      labels, options.calibration_rounds, 0, 0.0, [&](const ModelCalibration& label) {
        const auto& model_run = *jobs.at(label);
        return calibration_round(run, model_run, label.key,
                                 raw_at(run, model_run, label.key.M).costs);
      });
  for (const auto& label : labels) {
    const auto& mr = jobs.at(label);
    const auto& key = label.key;
    const double median = run.calibrations.median(label);
    spdlog::info("{}: calibration at M={} {:.3f}, the median of {} round(s) spread {:.1f}%",
                 mr->model.label, key.M, median, run.calibrations.rounds(label).size(),
                 100 * run.calibrations.spread(label));
    run.result.calibrations.push_back({mr->model.config.name(), mr->model.label, key.M,
                                       key.describe(), run.calibrations.rounds(label), median});
  }
}

Profiled paired_profile(ScalingRun& run, const ModelRun& mr, int64_t M, int64_t K) {
  const RawProfile raw =
      run.options.check_reprofile ? profile_layers(run, mr, M) : raw_at(run, mr, M);
  if (!run.options.calibrate || !mr.can_measure) return with_calibration(raw, 1.0);
  auto key = one_device_key(run.options, mr.model, M);
  auto out = with_calibration(raw, calibration_round(run, mr, key, raw.costs));
  if (run.options.device_type == "cpu" && K > 1) {
    key.replicas = K;  // K one-device steps at once, as the run's K devices work
    out.contended = calibration_round(run, mr, key, raw.costs);
  }
  return out;
}

}  // namespace gpipe::tables::scaling
