// The measured costs a plan is predicted from: each layer's time and bytes at a micro-batch size.
//
// Why this file exists: a CPU's GEMMs lose efficiency on small micro-batches and gain little from
// a second thread on small ones, so a cost measured at one micro-batch size or thread count and
// scaled to another would mislead the planner by tens of percent. The CostBook therefore measures
// the model's layers (forward, the whole backward and its weight-gradient part, the optimizer
// update, parameter, kept-activation and output bytes) once at every (micro-batch, threads) the
// search asks for, and keeps the results in memory and, optionally, in a cache file keyed by the
// model's configuration and the machine, so a second planning run of the same model measures
// nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "gpipe/models/registry.h"
#include "gpipe/pipeline.h"
#include "tables/projection.h"

namespace gpipe::plan {

// Costs of every layer at one micro-batch size and thread count (milliseconds and bytes).
struct MicrobatchCosts {
  tables::LayerCosts layers;
  double input_bytes = 0;  // one micro-batch of the model's input
};

class CostBook {
 public:
  // `cache` is a JSON file of earlier measurements (created if missing); empty: none.
  CostBook(models::ModelConfig model, Pipeline::OptimizerFactory optimizer, std::string cache = "",
           uint64_t seed = 0);

  // Measures on first use (`microbatch` samples, `threads` intra-op threads on cpu:0).
  const MicrobatchCosts& at(int64_t microbatch, int threads);
  // How much slower the model's forward and backward at `microbatch` run when `workers` devices
  // of `threads` threads compute at once (they share the memory bandwidth and caches of one
  // machine) than when one runs alone: the ratio of the two medians, >= 1. Measured on first use.
  double contention(int64_t microbatch, int threads, int64_t workers);
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
  uint64_t seed_;
  std::string key_;  // the model and the machine
  int64_t num_layers_ = 0;
  int64_t state_slots_ = -1;
  int64_t measured_ = 0;
  std::map<std::pair<int64_t, int>, MicrobatchCosts> costs_;
  std::map<std::string, double> contention_;  // "microbatch x threads x workers"
};

}  // namespace gpipe::plan
