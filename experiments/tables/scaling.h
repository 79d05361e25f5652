// GPipe's Tables 2 and 3 with this engine: throughput against K partitions and M micro-batches,
// normalised to naive-2 (K=2, M=1), measured where the devices exist and projected elsewhere.
//
// Why this file exists: it is the body of the scaling_table driver, kept out of main() so that
// its pieces (presets, validation, normalisation, the report) are unit-tested. A row is
// `measured` when K devices are really there (K CUDA devices, or K CPU cores for K virtual
// devices with one intra-op thread each); otherwise `projected` (costs/projection.h: per-layer
// costs calibrated by a real one-device step of the same N and M where the model fits). Rows with K
// no larger than the devices present get both, and the projection check compares the two on this
// machine's own link (none: CPU virtual devices share memory), so the table checks its own
// projection. Measured rows are normalised by the measured baseline, projected rows by the
// projected one.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "costs/projection.h"
#include "gpipe/models/registry.h"
#include "gpipe/profile.h"
#include "gpipe/stage.h"
#include "gpipe/timing.h"
#include "tables/breakdown.h"
#include "tables/table_link.h"

namespace gpipe::tables {

struct ScalingModel {
  std::string label;  // "AmoebaNet-D (18, 256)"
  models::ModelConfig config;
  int64_t batch = 0;  // N, the mini-batch of every row
};

struct ScalingTableSpec {
  std::string id;     // "table2" | "table3"
  std::string title;  // caption
  std::string paper_hardware;
  std::vector<ScalingModel> models;
  std::vector<int64_t> partitions;  // K
  std::vector<int64_t> chunks;      // M
  // Link of the projected rows (table_link.h: a preset, or pcie-scaled / tpu-scaled). Under a
  // scaled link the measured rows run with the same link imposed on the in-process transport.
  std::string link;
  int64_t base_K = 2;  // the row every speedup divides by
  int64_t base_M = 1;
};

struct ScalingOptions {
  std::string preset;
  std::vector<ScalingTableSpec> tables;
  Checkpoint checkpoint = Checkpoint::kAlways;  // GPipe re-materialises every micro-batch
  // What every profile, calibration and measured step computes in.
  Precision precision = Precision::kFp32;
  std::string optimizer = "auto";   // auto: RMSProp for AmoebaNet, Adam for the Transformer
  std::string device_type = "cpu";  // cpu: virtual devices cpu:0..; cuda: cuda:0..
  // Rows with K <= this are also measured; 0 means the devices this machine has (CPU cores or
  // CUDA devices).
  int64_t max_measured_k = 0;
  int warmup_steps = 1;
  int timed_steps = 5;
  ProfileOptions profile = ProfileOptions().warmup(1).iterations(5).threads(1);
  // Rounds of each projection check: with more than one, every round calibrates the row's layer
  // costs at its M (a one-device step, where the table calibrates; on CPU virtual devices also K
  // of them at once, weighed by costs::contended_calibration) and measures the run
  // right after, so that a projection's calibration and its measurement see the same machine
  // (this one's speed drifts by tens of percent within minutes); the check compares the medians
  // and keeps every round's error. The table's measured row is round 0's. `check_reprofile` also
  // profiles every layer afresh in each round (about three times the time of a round).
  int check_rounds = 1;
  bool check_reprofile = false;
  // Calibrate each model's projections (costs/calibration.h) by a real one-device step (K=1, the
  // model's N, M micro-batches, the table's re-materialisation) over its projection, where the
  // model fits this machine: at each M of `calibration_chunks` (empty: the largest M of the
  // model's rows), in `calibration_rounds` rounds interleaved over the models and Ms, the median
  // scaling the costs of the rows whose M is nearest (by ratio; a tie takes the larger). Each
  // measurement runs `calibration_steps` timed steps after the warm-up.
  bool calibrate = true;
  int calibration_steps = 2;
  int calibration_rounds = 3;
  std::vector<int64_t> calibration_chunks;
};

// "quick": scaled-down AmoebaNet-D and Transformer-L that run on two CPU cores in minutes.
// "paper": AmoebaNet-D (18, 256) and Transformer-48 for Table 2, AmoebaNet-D (18, 128) and
// Transformer-24 for Table 3, at the paper's dimensions (hours, and tens of GiB). Throws
// ConfigError for another name.
ScalingOptions scaling_preset(const std::string& name);
const std::vector<std::string>& scaling_preset_names();

// The paper's speedup for a row of `table` ("table2" at K in {2, 4, 8} and M in {1, 4, 32};
// "table3" at M = 32), if it has one.
std::optional<double> paper_speedup(const std::string& table, const std::string& model, int64_t K,
                                    int64_t M);

// Throws ConfigError, naming the value and the fix, when a table cannot be made: K larger than
// a model's layer count, M that does not divide N, a baseline (K, M) missing from the lists, an
// unknown link or device type, no models.
void validate(const ScalingOptions& options);

struct ScalingRow {
  std::string table;  // "table2" | "table3"
  std::string model;  // registry name
  std::string label;
  int64_t K = 0;
  int64_t M = 0;
  int64_t batch = 0;
  std::string source;  // "measured" | "projected"
  std::string link;    // measured rows: "none" on CPU virtual devices, or the scaled link imposed
  double step_ms = 0;
  double samples_per_s = 0;
  std::optional<double> speedup;  // against the same source's baseline
  std::optional<double> paper_speedup;
  std::optional<double> bubble_fraction;  // projected rows
  // Share of the step the link adds: 1 - (simulated step without the link) / (with it), from
  // the simulation of the row's K, M and partition (measured rows: of their projected twin).
  double comm_fraction = 0;
  std::vector<int64_t> balance;
  // Cores that other processes kept busy while this row was measured (measured rows) or its
  // per-layer costs profiled (projected rows): near 0 on an idle machine.
  double other_cores = 0;
  // The one-device calibration the projection's compute costs were scaled by (1: none; measured
  // rows: their projected twin's).
  double calibration = 1;
};

// One model's calibration: the step it measured (CalibrationKey::describe) and every round.
struct ScalingCalibration {
  std::string model;  // registry name
  std::string label;
  int64_t M = 0;
  std::string name;
  std::vector<double> rounds;
  double median = 1;
};

// Measured against projected on this machine's link, at the same K, M and partition.
struct ProjectionCheck {
  std::string model;
  std::string label;
  int64_t K = 0;
  int64_t M = 0;
  std::string link;  // "none", or the scaled link both the measurement and projection used
  double measured_samples_per_s = 0;
  double projected_samples_per_s = 0;
  double other_cores_measured = 0;  // see ScalingRow::other_cores
  double other_cores_profiled = 0;
  // Each round's projected / measured - 1 (one entry per round; ScalingOptions::check_rounds).
  std::vector<double> round_errors;
  // Each round's calibration: the model's (one round), or the round's own (several rounds).
  std::vector<double> round_calibrations;
  // The check: the median of the rounds' own errors. A round's profile and its measurement run
  // within a minute of each other, so each pair shares that minute's machine, which drifts by
  // tens of percent between rounds; without rounds, the medians' error below.
  double error() const { return round_errors.empty() ? error_of_medians() : median(round_errors); }
  // projected / measured - 1, of the medians over the rounds (the pairing lost).
  double error_of_medians() const { return projected_samples_per_s / measured_samples_per_s - 1.0; }
};

// For each (model, source) among `table`'s rows, divides samples/s by the samples/s of that
// model's and source's row at (base_K, base_M). A source without its baseline row gets no
// speedups (a table measured only at K devices the machine lacks); throws ConfigError when no
// source of a model has its baseline.
void normalise(std::vector<ScalingRow>& rows, const std::string& table, int64_t base_K,
               int64_t base_M);

struct ScalingResult {
  ScalingOptions options;
  std::vector<ScalingRow> rows;
  std::vector<ProjectionCheck> checks;
  std::vector<ScalingCalibration> calibrations;  // one per calibrated model
  int64_t max_measured_k = 0;                    // as resolved on this machine
  std::map<std::string, TableLink> links;        // by table id
  // Table 2's rows split into forward, backward, recompute, bubble, imbalance, communication
  // and optimizer (breakdown.h): simulated for every row, measured where the row is.
  BreakdownReport breakdown;
  nlohmann::json machine;  // threads, load average before and after
  double seconds = 0;
  std::string command;  // the command line that made it
};

// Profiles, measures and projects every row of every table, logging progress.
ScalingResult run_scaling(const ScalingOptions& options);

nlohmann::json to_json(const ScalingResult& result);
std::string to_markdown(const ScalingResult& result);
std::string to_csv(const ScalingResult& result);

}  // namespace gpipe::tables
