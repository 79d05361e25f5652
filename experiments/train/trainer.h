// The trainer: a model, a pipeline, data and an optimizer, run for a number of steps.
//
// Why this file exists: it is the one training loop behind gpipe_train and the table drivers,
// so every figure they print comes from the same code path. It builds the model's layers,
// resolves the balance (given, or the exact partition by parameters, profiled time or memory),
// builds the Pipeline, and reports per-step losses, throughput, the measured bubble and the
// memory meter's peaks.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "gpipe/distributed.h"
#include "gpipe/models/model.h"
#include "gpipe/pipeline.h"
#include "train/train_options.h"

namespace gpipe::train {

struct TrainResult {
  std::vector<double> losses;
  std::vector<double> step_seconds;
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;
  std::vector<int64_t> peak_memory_bytes_per_device;
  std::vector<int64_t> peak_activation_bytes_per_device;
  std::vector<int64_t> balance;
  int64_t parameters = 0;
  double param_checksum = 0;

  nlohmann::json to_json() const;
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  TrainResult run();

  Pipeline& pipeline() { return *pipeline_; }
  // Whether this process reports (logs progress, writes outputs): always in-process; global
  // rank 0 in a distributed run.
  bool reports() const { return context_ == nullptr || context_->rank() == 0; }

 private:
  void resolve_balance();
  // This replica's rows of the global mini-batch.
  models::SampleBatch shard(models::SampleBatch batch) const;
  // One synthetic mini-batch for `step`: a pure function of (seed, step).
  models::SampleBatch synthetic_batch(int64_t step) const;

  TrainOptions options_;
  std::unique_ptr<models::ModelBuilder> builder_;
  std::unique_ptr<distributed::Context> context_;
  LayerList layers_;  // every layer in-process; this stage's layers in a distributed run
  int64_t total_layers_ = 0;
  std::vector<int64_t> balance_;
  std::unique_ptr<Pipeline> pipeline_;
};

}  // namespace gpipe::train
