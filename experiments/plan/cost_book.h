// The measured costs a plan is predicted from: each layer's time and bytes at a micro-batch size.
//
// Why this file exists: a CPU's GEMMs lose efficiency on small micro-batches and gain little from
// a second thread on small ones, so a cost measured at one micro-batch size or thread count and
// scaled to another would mislead the planner by tens of percent. The CostBook therefore measures
// the model's layers (forward as kept, checkpointed and recomputed, the whole backward and its
// weight-gradient part, the optimizer update, parameter, kept-activation and output bytes) once
// at every (micro-batch, threads) the search asks for, and keeps the results in memory and,
// optionally, in a cache file keyed by the model's configuration and the machine, so a second
// planning run of the same model measures nothing. Each (micro-batch, threads, K, M, R,
// re-materialisation, schedule family) is also calibrated against real steps (in rounds, for the
// plans that contend), and each data-parallel width's gradient all-reduce timed.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "costs/calibration.h"
#include "costs/layer_costs.h"
#include "gpipe/models/registry.h"
#include "gpipe/pipeline.h"

namespace gpipe::plan {

// Costs of every layer at one micro-batch size and thread count (milliseconds and bytes).
struct MicrobatchCosts {
  costs::LayerCosts layers;
  double input_bytes = 0;  // one micro-batch of the model's input
};

// Writes each entry's fingerprint anew into `cache` (a cost cache file's JSON): for a tool or a
// test that edits a cache on purpose. A CostBook ignores an entry whose fingerprint does not
// match its model, machine, LibTorch and contents.
void seal_cost_cache(nlohmann::json& cache);

class CostBook {
 public:
  // `cache` is a JSON file of earlier measurements (created if missing); empty: none. `devices`:
  // the accelerators to measure on (the first profiles, the first K x R calibrate); empty: CPU.
  // Every cost, calibration and all-reduce is of `precision`: each precision has its own cache
  // entry.
  CostBook(models::ModelConfig model, Pipeline::OptimizerFactory optimizer, std::string cache = "",
           uint64_t seed = 0, std::vector<std::string> devices = {},
           Precision precision = Precision::kFp32);
  Precision precision() const { return precision_; }

  // Measures on first use (`microbatch` samples, `threads` intra-op threads on the first
  // device, cpu:0 for CPU plans).
  const MicrobatchCosts& at(int64_t microbatch, int threads);
  // The calibration (costs/calibration.h) of plans at `microbatch` on `stages` devices with
  // `replicas` replicas, `checkpoint` and a schedule of `family`: the family's representative
  // step of K = `stages` devices (at most the layers; M = min(2K, max_chunks), time-balanced) at
  // `microbatch`. `replicas` > 1 runs that many such steps at once on their own devices, as a
  // data-parallel plan's replicas share the machine (the slowest counts). `max_chunks` (the
  // plan's M) keeps the step to the plan's batch: 2K micro-batches of the largest size would
  // cost 2K plans' steps to calibrate. A family whose representative cannot run that K and M
  // (a V needs 2K layers) is calibrated as fused.
  costs::CalibrationKey calibration_key(
      int64_t microbatch, int threads, int64_t stages, int64_t replicas, int64_t max_chunks,
      Checkpoint checkpoint = Checkpoint::kNever,
      costs::ScheduleFamily family = costs::ScheduleFamily::kFused) const;
  // The calibration in use for `key` (calibration_in_use), measured over simulated on first use;
  // the median of its rounds once calibrate_in_rounds has measured it again.
  double calibration(const costs::CalibrationKey& key);
  // Measures the calibrations of `keys` again in interleaved rounds (Calibrations::
  // measure_in_rounds); returns how many measurements it made.
  int64_t calibrate_in_rounds(
      const std::vector<costs::CalibrationKey>& keys, int rounds, int extra_rounds = 0,
      double unsettled = costs::Calibrations<costs::CalibrationKey>::kUnsettledSpread);
  // One measurement of the calibration `key` now: measured over simulated, after `warmup`
  // steps. Not kept; what a check pairs with a measurement taken right after it.
  double measure_calibration(const costs::CalibrationKey& key, int warmup = 1);
  // The measurements behind a calibration (empty if not made).
  std::vector<double> calibration_rounds(const costs::CalibrationKey& key) const {
    return calibration_.rounds(key);
  }
  // The calibration a prediction of `key` uses now: itself once measured, or until then its
  // screening key (CalibrationKey::screening: never, fused). Re-materialisation changes the ratio
  // (a step that keeps every micro-batch's activations runs its backwards on data gone cold; a
  // checkpointed one rebuilds them right before), and so does the family, so each has its own
  // calibration once measured (calibrate_in_rounds, for the contenders and the grid); screening
  // keeps a first search to one calibration per (micro-batch, threads, K, M, R).
  costs::CalibrationKey calibration_in_use(const costs::CalibrationKey& key) const;
  // Milliseconds of the data-parallel gradient all-reduce: `stages` groups of `replicas` ranks at
  // once (each stage sums over its replicas), each summing `bytes` the way the trainer does
  // (grad_reducer.h: buckets of PipelineOptions' default size, one after another), Gloo over
  // loopback between this process's threads, one intra-op thread each; the median of 3 after a
  // warm-up. Measured on first use, keyed by (K, R, MiB). This is what CPU replicas on this
  // machine pay; accelerators' interconnects are not measured here (the planner's
  // `--allreduce-gbs` gives theirs).
  double allreduce_ms(int64_t stages, int64_t replicas, double bytes);
  // Optimizer state tensors per parameter, counted by the memory meter over one real step of
  // the optimizer (SGD with momentum 1, RMSProp 1 or 2 with momentum, Adam 2).
  int64_t state_slots();
  int64_t num_layers() const { return num_layers_; }
  // How many measurements this book made (not read from the cache).
  int64_t measured() const { return measured_; }
  const models::ModelConfig& model() const { return model_; }
  const Pipeline::OptimizerFactory& optimizer() const { return optimizer_; }
  uint64_t seed() const { return seed_; }

 private:
  void save() const;

  models::ModelConfig model_;
  Pipeline::OptimizerFactory optimizer_;
  std::string cache_path_;
  std::vector<std::string> devices_;
  uint64_t seed_;
  Precision precision_ = Precision::kFp32;
  std::string key_;  // the model and the machine
  int64_t num_layers_ = 0;
  int64_t state_slots_ = -1;
  int64_t measured_ = 0;
  std::map<std::pair<int64_t, int>, MicrobatchCosts> costs_;
  costs::Calibrations<costs::CalibrationKey> calibration_;
  // (K, R, MiB) -> ms
  using AllReduceKey = std::tuple<int64_t, int64_t, int64_t>;
  std::map<AllReduceKey, double> allreduce_;
};

}  // namespace gpipe::plan
