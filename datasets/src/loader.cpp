#include "gpipe/datasets/loader.h"

#include <ATen/Parallel.h>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {

namespace {

void check_shard(int64_t shard, int64_t shards, int64_t microbatches) {
  GPIPE_CHECK(shards >= 1 && shard >= 0 && shard < shards && microbatches >= 1, ConfigError,
              "shard ", shard, " of ", shards, " (", microbatches,
              " micro-batches) is not a shard: need shards >= 1, 0 <= shard < shards and "
              "micro-batches >= 1");
}

}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  GPIPE_CHECK(dataset_ != nullptr, ConfigError, "Loader needs a dataset");
  GPIPE_CHECK(options_.batch_size() > 0, ConfigError, "batch_size must be positive, got ",
              options_.batch_size());
  GPIPE_CHECK(options_.workers() >= 0, ConfigError, "workers must be >= 0, got ",
              options_.workers());
  GPIPE_CHECK(options_.prefetch() >= 0, ConfigError, "prefetch must be >= 0, got ",
              options_.prefetch());
  check_shard(options_.shard(), options_.shards(), options_.shard_microbatches());
  GPIPE_CHECK(options_.batch_size() >= options_.shards() * options_.shard_microbatches(),
              ConfigError, "batch_size ", options_.batch_size(), " cannot be split over ",
              options_.shards(), " shards of ", options_.shard_microbatches(),
              " micro-batches; it needs at least one example for each");
  prefetch_ = options_.prefetch() > 0 ? options_.prefetch() : 2 * options_.workers();
  for (int64_t w = 0; w < options_.workers(); ++w)
    threads_.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    live_generation_ = ++generation_;
  }
  work_ready_.notify_all();
  for (auto& thread : threads_)
    thread.join();
}

int64_t Loader::batches_per_epoch() const {
  const int64_t n = dataset_->size();
  const int64_t b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> shard_positions(int64_t n, int64_t shard, int64_t shards,
                                     int64_t microbatches) {
  check_shard(shard, shards, microbatches);
  std::vector<int64_t> positions;
  for (int64_t m = 0; m < microbatches; ++m) {
    const int64_t first = n * m / microbatches;
    const int64_t k = n * (m + 1) / microbatches - first;
    for (int64_t i = first + k * shard / shards; i < first + k * (shard + 1) / shards; ++i)
      positions.push_back(i);
  }
  return positions;
}

std::vector<int64_t> Loader::shard_range(int64_t batch, int64_t examples) const {
  const int64_t begin = batch * options_.batch_size();
  const int64_t n = std::min<int64_t>(begin + options_.batch_size(), examples) - begin;
  auto positions =
      shard_positions(n, options_.shard(), options_.shards(), options_.shard_microbatches());
  for (auto& p : positions)
    p += begin;
  return positions;
}

std::vector<int64_t> Loader::batch_indexes(int64_t epoch, int64_t batch) const {
  GPIPE_CHECK(batch >= 0 && batch < batches_per_epoch(), ConfigError, "batch ", batch,
              " out of range: an epoch has ", batches_per_epoch(), " batches");
  const auto order = epoch_order(dataset_->size(), options_.shuffle(), options_.seed(), epoch);
  std::vector<int64_t> indexes;
  for (int64_t p : shard_range(batch, static_cast<int64_t>(order.size())))
    indexes.push_back(order[p]);
  return indexes;
}

void Loader::begin_epoch(int64_t epoch, int64_t start_batch) {
  GPIPE_CHECK(epoch >= 0, ConfigError, "epoch must be >= 0, got ", epoch);
  GPIPE_CHECK(start_batch >= 0 && start_batch <= batches_per_epoch(), ConfigError, "start batch ",
              start_batch, " out of range: an epoch has ", batches_per_epoch(), " batches of ",
              options_.batch_size());
  auto order = std::make_shared<const std::vector<int64_t>>(
      epoch_order(dataset_->size(), options_.shuffle(), options_.seed(), epoch));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_generation_ = ++generation_;
    started_ = true;
    epoch_ = epoch;
    order_ = std::move(order);
    next_to_claim_ = start_batch;
    next_to_return_ = start_batch;
    ready_.clear();
  }
  work_ready_.notify_all();
}

void Loader::end_epoch() {
  std::lock_guard<std::mutex> lock(mutex_);
  live_generation_ = ++generation_;
  next_to_claim_ = next_to_return_ = batches_per_epoch();
  ready_.clear();
}

bool Loader::abandoned(uint64_t generation) const {
  return live_generation_.load() != generation;
}

std::optional<Batch> Loader::load(const std::vector<int64_t>& order, int64_t epoch, int64_t batch,
                                  uint64_t generation) const {
  const auto positions = shard_range(batch, static_cast<int64_t>(order.size()));
  std::vector<Example> examples;
  examples.reserve(positions.size());
  for (int64_t k : positions) {
    if (abandoned(generation)) return std::nullopt;
    Rng rng = Rng::for_sample(options_.seed(), epoch, order[k]);
    examples.push_back(dataset_->get(order[k], rng));
  }
  return collate(examples);
}

void Loader::worker_loop() {
  // One thread per worker: no intra-op threads on top of the pool.
  at::set_num_threads(1);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [this] {
      return stopping_ || (started_ && next_to_claim_ < batches_per_epoch() &&
                           next_to_claim_ < next_to_return_ + prefetch_);
    });
    if (stopping_) return;
    const int64_t batch = next_to_claim_++;
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_;
    const auto order = order_;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = load(*order, epoch, batch, generation);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    if (generation != generation_ || (!slot.batch && !slot.error)) continue;
    ready_.emplace(batch, std::move(slot));
    batch_ready_.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  GPIPE_CHECK(started_, ConfigError, "Loader::next() called before begin_epoch()");
  if (next_to_return_ >= batches_per_epoch()) return std::nullopt;
  const int64_t batch = next_to_return_;
  if (threads_.empty()) {
    ++next_to_return_;
    const auto order = order_;
    const int64_t epoch = epoch_;
    const uint64_t generation = generation_;
    lock.unlock();
    return load(*order, epoch, batch, generation);
  }
  batch_ready_.wait(lock, [&] { return ready_.count(batch) > 0; });
  auto node = ready_.extract(batch);
  ++next_to_return_;
  lock.unlock();
  work_ready_.notify_all();
  if (node.mapped().error) std::rethrow_exception(node.mapped().error);
  return std::move(node.mapped().batch);
}

}  // namespace gpipe::datasets
