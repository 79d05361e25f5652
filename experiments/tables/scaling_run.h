// The state every part of a scaling-table run shares, and the parts' entry points: profile
// (scaling_profile.cpp), calibrate (scaling_calibration.cpp), project (scaling_projection.cpp),
// measure and check (scaling_measure.cpp); scaling.cpp holds the presets, the validation and the
// run that drives them.
//
// Why this file exists: run_scaling's seven concerns each read and fill the same caches (one
// profile per model and micro-batch, one calibration per model, one measurement per run); one
// header keeps that state in one place and each concern in a file of its own. Internal to
// gpipe_tables: the drivers use tables/scaling.h.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "costs/calibration.h"
#include "costs/measured_step.h"
#include "gpipe/models/registry.h"
#include "tables/scaling.h"
#include "tables/table_link.h"
#include "tables/workload.h"

namespace gpipe::tables::scaling {

inline std::string model_key(const ScalingModel& m) {
  return c10::str(models::to_json(m.config).dump(), "/N", m.batch);
}

inline std::vector<std::string> devices_for(const std::string& type, int64_t K) {
  std::vector<std::string> devices;
  for (int64_t i = 0; i < K; ++i)
    devices.push_back(c10::str(type, ":", i));
  return devices;
}

inline double elapsed_s(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Warns that `what` ran beside other work: its timing is not this machine's own.
inline void warn_if_busy(const std::string& what, double other_cores) {
  if (other_cores > 0.25) {
    spdlog::warn(
        "{}: other processes kept {:.2f} cores busy meanwhile; its timing is slower "
        "than this machine can do",
        what, other_cores);
  }
}

// A table's calibration: the model it scales (by label) and the step measured.
struct ModelCalibration {
  std::string label;
  costs::CalibrationKey key;

  bool operator<(const ModelCalibration& other) const {
    return std::tie(label, key) < std::tie(other.label, other.key);
  }
  std::string describe() const { return label + ": " + key.describe(); }
};

// Per model and micro-batch: the layer costs as profiled, and who else used the CPU meanwhile.
struct RawProfile {
  costs::LayerCosts costs;
  double other_cores = 0;
};

// The same costs with the model's calibration (1: none), which projections scale them by. A
// check round on CPU virtual devices also has the calibration of K one-device steps at once
// (`contended`, 0: none; costs::contended_calibration weighs the two).
struct Profiled {
  costs::LayerCosts costs;
  double other_cores = 0;
  double calibration = 1;
  double contended = 0;
};

// Each check round of a measured run: its projected and measured samples/s and calibration.
using CheckRounds = std::vector<std::tuple<double, double, double>>;

// What every row of run_scaling shares: the options, the result it fills, where the layers are
// profiled, and the caches that keep one profile per model and micro-batch and one measurement
// per run (a run that several tables ask for is measured once).
struct ScalingRun {
  ScalingRun(const ScalingOptions& options_in, ScalingResult& result_in)
      : options(options_in),
        result(result_in),
        profile_device(DeviceSpec::parse(options_in.device_type + ":0")),
        memory(physical_memory_bytes()) {}

  const ScalingOptions& options;
  ScalingResult& result;
  const DeviceSpec profile_device;
  const int64_t memory;                         // physical memory, 0 if unknown
  std::map<std::string, RawProfile> raw_cache;  // by model and micro-batch
  std::map<std::string, Profiled> costs_cache;  // the same, calibrated
  costs::Calibrations<ModelCalibration> calibrations;
  // model_key -> its calibrations by M
  std::map<std::string, std::map<int64_t, ModelCalibration>> calibration_of;
  std::map<std::string, costs::TrainingMeasurement> measured_cache;
  std::set<std::string> checked;
  std::map<std::string, CheckRounds> check_rounds;  // per measured run
};

// One model of one table, built once for all its rows.
struct ModelRun {
  const ScalingTableSpec& table;
  const TableLink& link;  // the table's
  const ScalingModel& model;
  const std::unique_ptr<models::ModelBuilder> builder;
  const std::string optimizer;
  const bool can_measure;  // its state fits this machine's memory
  const models::SampleBatch full_batch;
};

// ---- profile (scaling_profile.cpp) ----

// Profiles every layer at this micro-batch, logged with who else used the CPU.
RawProfile profile_layers(const ScalingRun& run, const ModelRun& mr, int64_t M);

// The caches' key of `mr`'s layer costs at M: the model and its micro-batch.
std::string costs_key(const ModelRun& mr, int64_t M);

// The layer costs of `mr` at M as profiled, the first time anyone asks for them.
const RawProfile& raw_at(ScalingRun& run, const ModelRun& mr, int64_t M);

// ---- calibrate (scaling_calibration.cpp) ----

// The calibrated layer costs of `mr` at M.
const Profiled& profiled_at(ScalingRun& run, const ModelRun& mr, int64_t M);

// Calibrates every model that fits this machine at its calibration Ms, in rounds interleaved
// over the models and Ms (ScalingOptions::calibration_rounds), before any row: each M of a model
// then takes the median of the nearest calibration.
void calibrate_models(ScalingRun& run, const std::vector<std::unique_ptr<ModelRun>>& model_runs);

// One check round's costs at M for a run on K devices: the run's profile at M (a fresh one under
// ScalingOptions::check_reprofile), calibrated now by a one-device step at M where the table
// calibrates (the round's calibration and measured run then share that minute's machine). On CPU
// virtual devices, whose K devices share the machine's caches and memory, K one-device steps at
// once give the contended calibration too (AmoebaNet-D's steps run 9-25% slower beside another:
// results/scaling_check/contention.md).
Profiled paired_profile(ScalingRun& run, const ModelRun& mr, int64_t M, int64_t K);

// ---- project (scaling_projection.cpp) ----

// The GPipe shape of a table row: K devices, M micro-batches, `balance`, the table's
// re-materialisation and precision, one thread per device.
PipelineShape table_shape(const ScalingOptions& options, int64_t K, int64_t M,
                          std::vector<int64_t> balance);

// The projected row at K and M: the simulated step on the table's link, its bubble and the
// share the link adds; Table 2 also gets the row's simulated breakdown.
ScalingRow projected_row(ScalingRun& run, const ModelRun& mr, const Profiled& profiled, int64_t K,
                         int64_t M);

// ---- measure and check (scaling_measure.cpp) ----

// The measured twin of the projected `row` (measured once per run, whichever tables ask), its
// measured breakdown for Table 2 and, the first time the run is seen, its projection check.
void add_measured_row(ScalingRun& run, const ModelRun& mr, const Profiled& profiled,
                      const ScalingRow& row);

}  // namespace gpipe::tables::scaling
