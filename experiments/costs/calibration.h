// How much longer real steps through the engine take than the simulator predicts from isolated
// layer costs: one calibration, measured in rounds.
//
// Why this file exists: per-layer costs (layer_costs.h) are timed one layer at a time, on data in
// cache, with nothing else running. A real step also pays what they miss: layers running on data
// gone cold between a micro-batch's forward and its backward, CPU devices sharing one machine's
// memory bandwidth, the executor's hand-offs. Both the planner and the projected table columns
// therefore scale their layer costs by a measured step over its projection. That ratio anchors
// every prediction made with it, and this machine's speed drifts by tens of percent within a
// minute, so a calibration is measured in rounds interleaved with the others and its median used:
// one slow minute then moves one round, not the calibration.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/pipeline_shape.h"
#include "costs/layer_costs.h"
#include "gpipe/errors.h"
#include "gpipe/models/model.h"
#include "gpipe/pipeline.h"
#include "gpipe/timing.h"

namespace gpipe::costs {

// Which calibration a schedule's prediction uses. The layer costs miss different things in
// different schedules: a fused backward runs each layer's backward in one pass, a split one
// runs B and then W later on data gone cold, and a V places two stages on every device, so the
// ratio of a real step to its projection is measured per family, on the family's representative.
enum class ScheduleFamily {
  kFused,  // gpipe, 1f1b, interleaved-1f1b, looped-bfs: measured on gpipe
  kSplit,  // zb-h1, zb-h2, a program that lists W: measured on zb-h1
  kV,      // zbv, dualpipev, v-half, a program whose stages fold back: measured on zbv
};
std::string to_string(ScheduleFamily family);
// The family of `schedule`: kV when its stage K sits on device K-1 (the V turns back), else kSplit
// when it lists W actions, else kFused. A schedule of one device is kFused.
ScheduleFamily schedule_family(const Schedule& schedule);
// The schedule a family's calibration measures.
ScheduleKind representative(ScheduleFamily family);

// The step a calibration measures: `replicas` pipelines of K devices at once, each M
// micro-batches of `microbatch` samples with `threads` intra-op threads per device and
// `checkpoint` re-materialisation, scheduled as `family`'s representative and time-balanced.
struct CalibrationKey {
  int64_t microbatch = 1;
  int threads = 1;
  int64_t K = 1;
  int64_t M = 1;
  int64_t replicas = 1;
  Checkpoint checkpoint = Checkpoint::kNever;
  ScheduleFamily family = ScheduleFamily::kFused;

  // The shape measured and projected: the representative's schedule and v on K devices (no
  // balance: the projection's by time).
  PipelineShape shape() const;
  // The key that predicts until this one is measured: the same step without re-materialisation,
  // fused, which every plan of the same micro-batch, threads, K, M and R shares, so a first search
  // measures one calibration per such group.
  CalibrationKey screening() const;
  // "micro-batch 16, 1 thread, K=2 M=4 R=1, never, fused": for logs and reports, never parsed.
  std::string describe() const;
  bool operator<(const CalibrationKey& other) const;
  bool operator==(const CalibrationKey& other) const;
};
void to_json(nlohmann::json& json, const CalibrationKey& key);
// Throws ConfigError naming the field that is missing or out of range.
void from_json(const nlohmann::json& json, CalibrationKey& key);

struct CalibrationOptions {
  // The devices of the pipelines, K per replica in order; empty: cpu:0, cpu:1, ...
  TORCH_ARG(std::vector<std::string>, devices);
  // The sample batch is drawn with seed + 1, the model initialised with seed.
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(int, warmup) = 1;
  // Timed steps; 0: as many as last about kCalibrationMs of the projected step (at least one).
  TORCH_ARG(int, steps) = 0;
  // What the measured step computes in (the costs it is compared with must be of it too).
  TORCH_ARG(Precision, precision) = Precision::kFp32;
};

// One measurement lasts about this long when CalibrationOptions::steps is 0: the median of 3
// steps of a few milliseconds is one scheduler hiccup away from wrong on a shared machine.
constexpr double kCalibrationMs = 300;

// What Calibrations' template shares, defined once: the largest round over the smallest less 1,
// the checks of a ratio and of round counts, and a round's log line (`spread` < 0: a regular
// round).
double rounds_spread(const std::vector<double>& rounds);
void check_ratio(const std::string& what, double ratio);
void check_rounds(int rounds, int extra_rounds);
void log_round(const std::string& what, int round, int rounds, double spread);

struct CalibrationStep {
  double measured_ms = 0;   // the slowest replica's median step
  double projected_ms = 0;  // project() of the key's step over `costs`, without a link
  double ratio() const { return measured_ms / projected_ms; }
};

// The calibration of a step on K devices that contend for one machine's caches and memory (CPU
// virtual devices) when they work at once: `alone`, a one-device step's ratio, where one device
// works; `together`, the ratio of K one-device steps run at once, where all K work; weighted by
// the share of the step all K are busy, at least (K (1 - bubble) - 1) / (K - 1) of it (at K = 2,
// 1 - 2 bubble; none at K = 1). Throws ConfigError for a ratio that is not finite and > 0, a
// bubble outside [0, 1] or K < 1.
double contended_calibration(double alone, double together, double bubble, int64_t K);

// Measures the step `key` names of `builder`'s model (layer costs `costs`, measured at
// key.microbatch) with `optimizer`, against its projection from `costs`. Throws ConfigError when
// the devices are fewer than K x replicas, or the key's schedule cannot run its K and M.
CalibrationStep measure_calibration(const models::ModelBuilder& builder, const LayerCosts& costs,
                                    const CalibrationKey& key,
                                    const Pipeline::OptimizerFactory& optimizer,
                                    const CalibrationOptions& options = {});

// Calibrations and the rounds measured of each, by `Key` (CalibrationKey, or a table's model and
// key); a calibration is the median of its rounds. A Key is ordered (operator<) and has a
// describe() for the log.
template <class Key>
class Calibrations {
 public:
  // How far a calibration's rounds may disagree before extra rounds measure it again.
  static constexpr double kUnsettledSpread = 0.10;

  // The rounds of `key` (empty if none was measured).
  const std::vector<double>& rounds(const Key& key) const {
    static const std::vector<double> kNone;
    const auto found = rounds_.find(key);
    return found == rounds_.end() ? kNone : found->second;
  }
  bool has(const Key& key) const { return !rounds(key).empty(); }
  // The median of `key`'s rounds; throws ConfigError when it has none.
  double median(const Key& key) const {
    GPIPE_CHECK(has(key), ConfigError, "the calibration ", key.describe(),
                " has not been measured");
    return gpipe::median(rounds(key));
  }
  // The largest round over the smallest, less 1 (0 with fewer than two rounds).
  double spread(const Key& key) const { return rounds_spread(rounds(key)); }
  void add(const Key& key, double ratio) {
    check_ratio(key.describe(), ratio);
    rounds_[key].push_back(ratio);
  }

  // Measures the calibrations of `keys` with `measure`, one round of all of them after another,
  // until each has `rounds` (rounds already held count), then up to `extra_rounds` more rounds
  // of those whose spread is still above `unsettled`: a median of 3 follows two rounds taken in
  // busy minutes, one of 5 outvotes them. Returns how many measurements it made.
  int64_t measure_in_rounds(const std::vector<Key>& keys, int rounds, int extra_rounds,
                            double unsettled, const std::function<double(const Key&)>& measure) {
    check_rounds(rounds, extra_rounds);
    int64_t made = 0;
    for (int round = 1; round <= rounds + extra_rounds; ++round) {
      for (const auto& key : keys) {
        if (static_cast<int>(this->rounds(key).size()) >= round) continue;
        const bool extra = round > rounds;
        if (extra && spread(key) <= unsettled) continue;
        log_round(key.describe(), round, rounds, extra ? spread(key) : -1);
        add(key, measure(key));
        ++made;
      }
    }
    return made;
  }

  const std::map<Key, std::vector<double>>& all() const { return rounds_; }

 private:
  std::map<Key, std::vector<double>> rounds_;
};

// The cost cache's form: [{"key": {...}, "rounds": [...]}, ...]. from_json throws ConfigError on
// any other form (caches older than typed keys), naming it.
nlohmann::json to_json(const Calibrations<CalibrationKey>& calibrations);
Calibrations<CalibrationKey> calibrations_from_json(const nlohmann::json& json);

}  // namespace gpipe::costs
