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

#include "costs/layer_costs.h"
#include "gpipe/models/model.h"
#include "gpipe/pipeline.h"

namespace gpipe::costs {

// The step a calibration measures: `replicas` GPipe pipelines of K time-balanced devices at
// once, each M micro-batches of `microbatch` samples with `threads` intra-op threads per device
// and `checkpoint` re-materialisation.
struct CalibrationKey {
  int64_t microbatch = 1;
  int threads = 1;
  int64_t K = 1;
  int64_t M = 1;
  int64_t replicas = 1;
  Checkpoint checkpoint = Checkpoint::kNever;

  // "microbatch x threads x K x M x R", then "/checkpoint" unless it is never (the names of the
  // planner's cost caches).
  std::string name() const;
  // The key `name()` gave. Throws ConfigError naming the text otherwise.
  static CalibrationKey parse(const std::string& name);
  bool operator==(const CalibrationKey& other) const { return name() == other.name(); }
};

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

struct CalibrationStep {
  double measured_ms = 0;   // the slowest replica's median step
  double projected_ms = 0;  // project_step of `costs` at the key's K and M, without a link
  double ratio() const { return measured_ms / projected_ms; }
};

// Measures the step `key` names of `builder`'s model (layer costs `costs`, measured at
// key.microbatch) with `optimizer`, against its projection from `costs`. Throws ConfigError when
// the devices are fewer than K x replicas.
CalibrationStep measure_calibration(const models::ModelBuilder& builder, const LayerCosts& costs,
                                    const CalibrationKey& key,
                                    const Pipeline::OptimizerFactory& optimizer,
                                    const CalibrationOptions& options = {});

// Named calibrations and the rounds measured of each; a calibration is the median of its rounds.
class Calibrations {
 public:
  // How far a calibration's rounds may disagree before extra rounds measure it again.
  static constexpr double kUnsettledSpread = 0.10;

  // The rounds of `name` (empty if none was measured).
  const std::vector<double>& rounds(const std::string& name) const;
  bool has(const std::string& name) const { return !rounds(name).empty(); }
  // The median of `name`'s rounds; throws ConfigError when it has none.
  double median(const std::string& name) const;
  // The largest round over the smallest, less 1 (0 with fewer than two rounds).
  double spread(const std::string& name) const;
  void add(const std::string& name, double ratio);

  // Measures the named calibrations with `measure`, one round of all of them after another,
  // until each has `rounds` (rounds already held count), then up to `extra_rounds` more rounds
  // of those whose spread is still above `unsettled`: a median of 3 follows two rounds taken in
  // busy minutes, one of 5 outvotes them. Returns how many measurements it made.
  int64_t measure_in_rounds(const std::vector<std::string>& names, int rounds, int extra_rounds,
                            double unsettled,
                            const std::function<double(const std::string&)>& measure);

  // {name: [round, ...]}; from_json also reads the single number of older caches as one round.
  nlohmann::json to_json() const;
  static Calibrations from_json(const nlohmann::json& json);

 private:
  std::map<std::string, std::vector<double>> rounds_;
};

}  // namespace gpipe::costs
