// Where the trainer's batches come from: a real dataset through the prefetching loader, or the
// model's own synthetic batches.
//
// Why this file exists: the training loop should not care whether a batch was decoded from
// Fashion-MNIST or drawn from a generator. Both are pure functions of (seed, epoch, batch), so a
// resumed run sees exactly the batches the interrupted one would have.
#pragma once

#include <memory>
#include <optional>

#include "gpipe/datasets/datasets.h"
#include "gpipe/models/model.h"
#include "train/train_options.h"

namespace gpipe::train {

class TrainingData {
 public:
  explicit TrainingData(const TrainOptions& options);
  ~TrainingData();

  // A real dataset decides the model's input channels and classes (logged when it changes them).
  void apply_to(models::ModelConfig& model) const;
  // Synthetic batches come from the model; call once the model exists.
  void set_model(const models::ModelBuilder* builder) { builder_ = builder; }

  bool synthetic() const { return train_ == nullptr; }
  int64_t steps_per_epoch() const;
  int64_t train_examples() const;
  std::string describe() const;

  // Data parallelism: next() returns only replica `replica`'s part of each mini-batch (of
  // replicas R): its slice of each of the `microbatches` micro-batches (LoaderOptions::shard).
  // A real dataset's loader decodes only that part; synthetic batches are drawn whole and cut.
  // Call before the first begin_epoch.
  void shard(int64_t replica, int64_t replicas, int64_t microbatches);

  void begin_epoch(int64_t epoch, int64_t start_batch);
  // The next batch of the epoch (this replica's part), or nullopt at its end.
  std::optional<models::SampleBatch> next();
  // Examples the last next() loaded or drew on this process.
  int64_t examples_loaded() const { return examples_loaded_; }

  // The test split (nullptr for synthetic data, or a dataset without one).
  datasets::Loader* test() { return test_.get(); }

 private:
  TrainOptions options_;
  const models::ModelBuilder* builder_ = nullptr;
  std::shared_ptr<datasets::Dataset> train_set_, test_set_;
  std::unique_ptr<datasets::Loader> train_, test_;
  int64_t epoch_ = 0;
  int64_t batch_ = 0;
  int64_t replica_ = 0, replicas_ = 1, microbatches_ = 1;
  int64_t examples_loaded_ = 0;
};

}  // namespace gpipe::train
