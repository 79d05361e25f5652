// Loader: batches of a Dataset, made by a pool of worker threads and handed out in order.
//
//   Loader loader(dataset, LoaderOptions(64).workers(2).shuffle(true).drop_last(true).seed(1));
//   for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
//     loader.begin_epoch(epoch, epoch == start_epoch ? start_batch : 0);  // resume mid-epoch
//     while (auto batch = loader.next()) train_step(batch->input, batch->target);
//   }
//
// Why this file exists: on CPU the JPEG decode and augmentation of a batch cost as much as a
// pipeline step, so they run on worker threads ahead of the trainer. Results must not depend on
// the threads, though: an epoch's order is a pure function of (seed, epoch) and sample i's
// augmentation draws from Rng::for_sample(seed, epoch, i), so the batches are the same for any
// number of workers and when an epoch is resumed at any batch. Each worker makes whole batches
// (one thread each, so at::set_num_threads(1)); at most
// `prefetch` batches are ready or in progress ahead of the consumer. A worker's exception is
// rethrown by next() at the batch it belongs to. Destroying the loader, or beginning another
// epoch, abandons the work in flight: workers stop between samples and are joined.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "gpipe/datasets/batch.h"
#include "gpipe/datasets/dataset.h"

namespace gpipe::datasets {

struct LoaderOptions {
  /* implicit */ LoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}
  TORCH_ARG(int64_t, batch_size);
  // Worker threads; 0 makes each batch on the calling thread, inside next().
  TORCH_ARG(int64_t, workers) = 0;
  // A fresh permutation each epoch, a pure function of (seed, epoch).
  TORCH_ARG(bool, shuffle) = false;
  // Drop the last batch when it is smaller than batch_size.
  TORCH_ARG(bool, drop_last) = false;
  // Seeds the shuffle and every sample's augmentation.
  TORCH_ARG(uint64_t, seed) = 0;
  // Batches ready or in progress ahead of the consumer; 0 means 2 per worker.
  TORCH_ARG(int64_t, prefetch) = 0;
  // Data parallelism: load only part `shard` of `shards` of every batch, in the same global
  // order for every shard: of each of the batch's `shard_microbatches` micro-batches, its
  // shard-th slice (shard_positions). The shards' batches are disjoint, and each replica's m-th
  // micro-batch is its slice of the unsharded run's m-th micro-batch (what synchronised
  // BatchNorm needs; exact when shards * shard_microbatches divides the batch). Nothing outside
  // the shard is decoded.
  TORCH_ARG(int64_t, shard) = 0;
  TORCH_ARG(int64_t, shards) = 1;
  TORCH_ARG(int64_t, shard_microbatches) = 1;
};

// Positions (0..n-1) of shard `shard` of `shards` of a batch of n: the shard-th slice of each
// of the batch's `microbatches` micro-batches ([n*m/M, n*(m+1)/M)), slice q of a micro-batch of
// size k being [k*q/R, k*(q+1)/R). Throws ConfigError for a shard outside [0, shards).
std::vector<int64_t> shard_positions(int64_t n, int64_t shard, int64_t shards,
                                     int64_t microbatches = 1);

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts epoch `epoch` at batch `start_batch` (0 <= start_batch <= batches_per_epoch()),
  // abandoning whatever the previous epoch still had in flight.
  void begin_epoch(int64_t epoch, int64_t start_batch = 0);
  // Ends the current epoch early: the work in flight is abandoned, the workers wait for the
  // next begin_epoch, and next() returns nullopt until then.
  void end_epoch();
  // The next batch of the current epoch, or nullopt when it is over. Rethrows the exception of
  // a batch whose loading failed. Throws ConfigError before the first begin_epoch.
  std::optional<Batch> next();

  int64_t batches_per_epoch() const;
  // The epoch begun last, and the index of the batch next() returns next.
  int64_t epoch() const { return epoch_; }
  int64_t batch_index() const { return next_to_return_; }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }

  // The dataset indexes of batch `batch` of `epoch` (a pure function of the options), this
  // shard's part of it.
  std::vector<int64_t> batch_indexes(int64_t epoch, int64_t batch) const;

 private:
  // Positions in the epoch's order of this shard's part of batch `batch`.
  std::vector<int64_t> shard_range(int64_t batch, int64_t examples) const;
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void worker_loop();
  // Loads one batch from `order`; returns nullopt when the epoch was abandoned meanwhile.
  std::optional<Batch> load(const std::vector<int64_t>& order, int64_t epoch, int64_t batch,
                            uint64_t generation) const;
  bool abandoned(uint64_t generation) const;

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  int64_t prefetch_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;   // workers wait for batches to claim
  std::condition_variable batch_ready_;  // next() waits for its batch
  bool started_ = false;
  bool stopping_ = false;
  uint64_t generation_ = 0;                   // bumped by begin_epoch and the destructor
  std::atomic<uint64_t> live_generation_{0};  // generation_, readable between samples
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> order_;
  int64_t next_to_claim_ = 0;
  int64_t next_to_return_ = 0;
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> threads_;
};

}  // namespace gpipe::datasets
