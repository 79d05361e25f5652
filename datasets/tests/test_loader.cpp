// Loader: order, determinism across worker counts and resumption, drop-last, errors, shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

// Example i is {i, one uniform draw of its rng}, label i; optionally slow, optionally failing
// at one index.
class ProbeDataset : public Dataset {
 public:
  explicit ProbeDataset(int64_t n, int64_t fail_at = -1, int sleep_ms = 0)
      : n_(n), fail_at_(fail_at), sleep_ms_(sleep_ms) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return n_; }
  int64_t channels() const override { return 1; }
  std::vector<int64_t> example_shape() const override { return {2}; }
  std::string name() const override { return "probe"; }
  Example get(int64_t index, Rng& rng) const override {
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    GPIPE_CHECK(index != fail_at_, DataError, "probe failure at example ", index);
    ++calls;
    return {torch::tensor({static_cast<double>(index), rng.uniform()}, torch::kDouble),
            torch::tensor(index, torch::kInt64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
  int64_t fail_at_;
  int sleep_ms_;
};

std::vector<Batch> epoch(Loader& loader, int64_t e, int64_t start = 0) {
  loader.begin_epoch(e, start);
  std::vector<Batch> out;
  while (auto batch = loader.next())
    out.push_back(std::move(*batch));
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].input, b[i].input)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].target, b[i].target)) << "batch " << i;
  }
}

TEST(Loader, VisitsEverySampleOncePerEpochInTheEpochOrder) {
  auto data = std::make_shared<ProbeDataset>(23);
  Loader loader(data, LoaderOptions(5).workers(2).shuffle(true).seed(4));
  EXPECT_EQ(loader.batches_per_epoch(), 5);
  const auto batches = epoch(loader, 3);
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(batches.back().size(), 3);  // 23 = 4 x 5 + 3
  std::vector<int64_t> seen;
  for (const auto& batch : batches) {
    for (int64_t i = 0; i < batch.size(); ++i)
      seen.push_back(batch.target[i].item<int64_t>());
  }
  EXPECT_EQ(seen, epoch_order(23, true, 4, 3));
  EXPECT_EQ(loader.batch_indexes(3, 4), std::vector<int64_t>(seen.end() - 3, seen.end()));
}

TEST(Loader, ShuffleChangesWithTheEpochAndNotWithoutIt) {
  auto data = std::make_shared<ProbeDataset>(40);
  Loader shuffled(data, LoaderOptions(40).shuffle(true));
  EXPECT_FALSE(torch::equal(epoch(shuffled, 0)[0].target, epoch(shuffled, 1)[0].target));
  Loader ordered(data, LoaderOptions(40));
  EXPECT_TRUE(torch::equal(epoch(ordered, 0)[0].target, torch::arange(40)));
  EXPECT_TRUE(torch::equal(epoch(ordered, 1)[0].target, torch::arange(40)));
}

TEST(Loader, BatchesDoNotDependOnTheNumberOfWorkers) {
  auto data = std::make_shared<ProbeDataset>(37);
  std::vector<std::vector<Batch>> runs;
  for (int64_t workers : {0, 1, 2, 3, 5}) {
    Loader loader(data, LoaderOptions(4).workers(workers).shuffle(true).seed(9).prefetch(3));
    runs.push_back(epoch(loader, 2));
  }
  for (size_t r = 1; r < runs.size(); ++r)
    expect_same(runs[0], runs[r]);
}

// Data parallelism: R shards of every batch are disjoint, concatenate to the unsharded batch
// (augmentation included), and each shard decodes only its own examples.
TEST(Loader, ShardsSplitEveryBatchWithoutDecodingTheOthers) {
  constexpr int64_t kShards = 3;
  auto whole_data = std::make_shared<ProbeDataset>(40);
  Loader whole(whole_data, LoaderOptions(12).shuffle(true).drop_last(true).seed(6));
  const auto expected = epoch(whole, 1);
  std::vector<std::vector<Batch>> shards;
  for (int64_t q = 0; q < kShards; ++q) {
    auto data = std::make_shared<ProbeDataset>(40);
    Loader loader(
        data, LoaderOptions(12).shuffle(true).drop_last(true).seed(6).workers(2).shard(q).shards(
                  kShards));
    shards.push_back(epoch(loader, 1));
    EXPECT_EQ(data->calls.load(), 3 * 4) << "shard " << q << " decodes 4 of each batch of 12";
    EXPECT_EQ(loader.batch_indexes(1, 0).size(), 4u);
  }
  ASSERT_EQ(expected.size(), 3u);
  for (size_t b = 0; b < expected.size(); ++b) {
    std::vector<torch::Tensor> inputs, targets;
    for (const auto& shard : shards) {
      ASSERT_EQ(shard.size(), expected.size());
      inputs.push_back(shard[b].input);
      targets.push_back(shard[b].target);
    }
    EXPECT_TRUE(torch::equal(torch::cat(inputs), expected[b].input)) << "batch " << b;
    EXPECT_TRUE(torch::equal(torch::cat(targets), expected[b].target)) << "batch " << b;
  }
  // By micro-batch: each shard takes its slice of each of the batch's micro-batches.
  EXPECT_EQ(shard_positions(12, 0, 3, 2), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(shard_positions(12, 2, 3, 2), (std::vector<int64_t>{4, 5, 10, 11}));
  auto data = std::make_shared<ProbeDataset>(40);
  Loader by_microbatch(
      data, LoaderOptions(12).shuffle(true).seed(6).shard(1).shards(3).shard_microbatches(2));
  const auto order = epoch_order(40, true, 6, 0);
  EXPECT_EQ(by_microbatch.batch_indexes(0, 1),
            (std::vector<int64_t>{order[14], order[15], order[20], order[21]}));
  EXPECT_THROW(Loader(data, LoaderOptions(12).shard(3).shards(3)), ConfigError);
  EXPECT_THROW(Loader(data, LoaderOptions(2).shards(3)), ConfigError);
}

TEST(Loader, AugmentationIsKeyedBySeedEpochAndSample) {
  auto data = std::make_shared<ProbeDataset>(8);
  Loader loader(data, LoaderOptions(8).seed(5));
  const auto batch = epoch(loader, 1)[0];
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_DOUBLE_EQ(batch.input[i][1].item<double>(), Rng::for_sample(5, 1, i).uniform());
  }
  EXPECT_FALSE(torch::equal(batch.input, epoch(loader, 2)[0].input));
}

TEST(Loader, ResumingMidEpochGivesTheSameRemainingBatches) {
  auto data = std::make_shared<ProbeDataset>(30);
  Loader full(data, LoaderOptions(4).workers(2).shuffle(true).seed(1));
  const auto all = epoch(full, 5);
  for (int64_t start : {1, 4, 7, 8}) {
    Loader resumed(data, LoaderOptions(4).workers(3).shuffle(true).seed(1));
    const auto rest = epoch(resumed, 5, start);
    expect_same(rest, std::vector<Batch>(all.begin() + start, all.end()));
  }
}

TEST(Loader, DropLast) {
  auto data = std::make_shared<ProbeDataset>(10);
  Loader loader(data, LoaderOptions(4).drop_last(true).workers(2));
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  const auto batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].size(), 4);
  Loader keep(data, LoaderOptions(4));
  EXPECT_EQ(keep.batches_per_epoch(), 3);
  Loader too_big(data, LoaderOptions(11).drop_last(true));
  EXPECT_EQ(too_big.batches_per_epoch(), 0);
  too_big.begin_epoch(0);
  EXPECT_FALSE(too_big.next().has_value());
}

TEST(Loader, BeginningAnotherEpochAbandonsTheOldOne) {
  auto data = std::make_shared<ProbeDataset>(40);
  Loader loader(data, LoaderOptions(4).workers(2).shuffle(true).seed(2));
  loader.begin_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  const auto fresh = epoch(loader, 1);
  Loader reference(data, LoaderOptions(4).shuffle(true).seed(2));
  expect_same(fresh, epoch(reference, 1));
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(loader.batch_index(), 10);
}

TEST(Loader, EndEpochStopsTheWorkers) {
  auto data = std::make_shared<ProbeDataset>(400, -1, /*sleep_ms=*/2);
  Loader loader(data, LoaderOptions(4).workers(2));
  loader.begin_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  loader.end_epoch();
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_EQ(loader.batch_index(), loader.batches_per_epoch());
  // Samples in progress finish; nothing new starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int64_t settled = data->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(data->calls.load(), settled);
  EXPECT_LT(settled, 40);
  // And the loader can start again.
  loader.begin_epoch(1);
  EXPECT_TRUE(loader.next().has_value());
}

TEST(Loader, PrefetchIsBounded) {
  auto data = std::make_shared<ProbeDataset>(100);
  Loader loader(data, LoaderOptions(2).workers(2).prefetch(3));
  loader.begin_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  // Wait until the workers have filled the prefetch window and stopped.
  int64_t before = -1;
  for (int i = 0; i < 100 && before != data->calls.load(); ++i) {
    before = data->calls.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // One batch consumed plus at most 3 ahead, of 2 examples each.
  EXPECT_LE(data->calls.load(), (1 + 3) * 2);
  EXPECT_GE(data->calls.load(), 2);
}

TEST(Loader, WorkerErrorIsRethrownAtItsBatch) {
  auto data = std::make_shared<ProbeDataset>(20, /*fail_at=*/9);
  Loader loader(data, LoaderOptions(4).workers(2));
  loader.begin_epoch(0);
  ASSERT_TRUE(loader.next().has_value());  // 0..3
  ASSERT_TRUE(loader.next().has_value());  // 4..7
  expect_error<DataError>([&] { loader.next(); }, {"probe failure at example 9"});
  ASSERT_TRUE(loader.next().has_value());  // 12..15: the loader goes on
  Loader inline_loader(data, LoaderOptions(4));
  inline_loader.begin_epoch(0, 2);
  expect_error<DataError>([&] { inline_loader.next(); }, {"example 9"});
}

TEST(Loader, DestroyingMidEpochStopsPromptly) {
  // 40 ms per sample, batches of 8: a batch takes 320 ms per worker. Destruction must not wait
  // for the epoch (50 batches), only for the samples in progress.
  auto data = std::make_shared<ProbeDataset>(400, -1, /*sleep_ms=*/40);
  const auto start = std::chrono::steady_clock::now();
  {
    Loader loader(data, LoaderOptions(8).workers(3).prefetch(6));
    loader.begin_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);  // a whole epoch would take 400 x 40 ms / 3 = 5.3 s
  EXPECT_LT(data->calls.load(), 100);
}

TEST(Loader, DestroyingBeforeAnyEpochAndAfterTheLast) {
  auto data = std::make_shared<ProbeDataset>(10);
  { Loader idle(data, LoaderOptions(2).workers(4)); }
  {
    Loader done(data, LoaderOptions(2).workers(2));
    EXPECT_EQ(epoch(done, 0).size(), 5u);
    EXPECT_FALSE(done.next().has_value());
  }
}

TEST(Loader, BadOptionsAndMisuse) {
  auto data = std::make_shared<ProbeDataset>(10);
  expect_error<ConfigError>([&] { Loader(data, LoaderOptions(0)); }, {"batch_size", "0"});
  expect_error<ConfigError>([&] { Loader(data, LoaderOptions(2).workers(-1)); }, {"workers"});
  expect_error<ConfigError>([&] { Loader(nullptr, LoaderOptions(2)); }, {"dataset"});
  Loader loader(data, LoaderOptions(3).workers(1));
  expect_error<ConfigError>([&] { loader.next(); }, {"begin_epoch"});
  expect_error<ConfigError>([&] { loader.begin_epoch(0, 5); }, {"start batch 5", "4 batches"});
  expect_error<ConfigError>([&] { loader.begin_epoch(-1); }, {"epoch", "-1"});
  loader.begin_epoch(0, 4);  // at the end: an empty remainder
  EXPECT_FALSE(loader.next().has_value());
}

TEST(Loader, ImageBatchesAreIdenticalWithAndWithoutWorkers) {
  auto data =
      make_dataset(DatasetOptions("synthetic").count(24).classes(3).image_size(16).augment(true));
  Loader inline_loader(data, LoaderOptions(5).shuffle(true).seed(3));
  Loader threaded(data, LoaderOptions(5).workers(2).shuffle(true).seed(3));
  const auto a = epoch(inline_loader, 0);
  expect_same(a, epoch(threaded, 0));
  EXPECT_EQ(a[0].input.sizes(), (std::vector<int64_t>{5, 3, 16, 16}));
  EXPECT_EQ(a[0].input.scalar_type(), torch::kFloat32);
  EXPECT_EQ(a[0].target.scalar_type(), torch::kInt64);
}

TEST(Loader, TokenBatches) {
  auto data = make_dataset(DatasetOptions("synthetic-tokens").count(10).seq_len(6).vocab(20));
  Loader loader(data, LoaderOptions(4).workers(2));
  const auto batches = epoch(loader, 0);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].input.sizes(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(batches[0].target.sizes(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(batches[2].input.sizes(), (std::vector<int64_t>{2, 6}));
}

}  // namespace
}  // namespace gpipe::datasets::testing
