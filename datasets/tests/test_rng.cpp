// The random streams are pure functions of their keys, and distributed as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

std::vector<uint64_t> draws(Rng rng, int n = 8) {
  std::vector<uint64_t> out;
  for (int i = 0; i < n; ++i)
    out.push_back(rng.next());
  return out;
}

TEST(Rng, SameSeedSameStream) {
  EXPECT_EQ(draws(Rng(42)), draws(Rng(42)));
  EXPECT_NE(draws(Rng(42)), draws(Rng(43)));
}

TEST(Rng, EverySamplePartOfTheKeyChangesTheStream) {
  const auto base = draws(Rng::for_sample(1, 2, 3));
  EXPECT_EQ(base, draws(Rng::for_sample(1, 2, 3)));
  EXPECT_NE(base, draws(Rng::for_sample(9, 2, 3)));
  EXPECT_NE(base, draws(Rng::for_sample(1, 9, 3)));
  EXPECT_NE(base, draws(Rng::for_sample(1, 2, 9)));
  // The parts are not interchangeable.
  EXPECT_NE(draws(Rng::for_sample(1, 2, 3)), draws(Rng::for_sample(1, 3, 2)));
}

TEST(Rng, UniformIsInRangeWithTheRightMean) {
  Rng rng(7);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  // Standard error of the mean is 1/sqrt(12 n) = 6.5e-4; allow 5 of them.
  EXPECT_NEAR(sum / n, 0.5, 5 * 6.5e-4);
  for (int i = 0; i < 1000; ++i) {
    const double v = rng.uniform(-2.0, 3.0);
    ASSERT_GE(v, -2.0);
    ASSERT_LT(v, 3.0);
  }
}

TEST(Rng, BelowCoversEveryValueEvenly) {
  Rng rng(11);
  std::vector<int> counts(7, 0);
  const int n = 70000;
  for (int i = 0; i < n; ++i) {
    const int64_t v = rng.below(7);
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 7);
    ++counts[v];
  }
  // Expected 10000 each, binomial sd ~93; allow 5 sd.
  for (int c : counts)
    EXPECT_NEAR(c, 10000, 470);
  EXPECT_EQ(rng.below(1), 0);
  expect_error<ConfigError>([&] { rng.below(0); }, {"positive", "0"});
}

TEST(Rng, TorchGeneratorIsSeededFromTheStream) {
  Rng a(5), b(5);
  auto ga = a.torch_generator();
  auto gb = b.torch_generator();
  EXPECT_TRUE(torch::equal(torch::randn({16}, ga), torch::randn({16}, gb)));
  auto gc = Rng(6).torch_generator();
  EXPECT_FALSE(torch::equal(torch::randn({16}, ga), torch::randn({16}, gc)));
}

TEST(EpochOrder, WithoutShuffleIsTheIdentity) {
  const auto order = epoch_order(5, false, 1, 3);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(epoch_order(0, true, 1, 0).empty());
}

TEST(EpochOrder, ShuffleIsAPermutationFixedBySeedAndEpoch) {
  const auto order = epoch_order(1000, true, 1, 0);
  auto sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, epoch_order(1000, false, 0, 0));
  EXPECT_NE(order, epoch_order(1000, false, 0, 0));
  EXPECT_EQ(order, epoch_order(1000, true, 1, 0));
  EXPECT_NE(order, epoch_order(1000, true, 1, 1));
  EXPECT_NE(order, epoch_order(1000, true, 2, 0));
}

TEST(EpochOrder, EveryPositionIsReachedByShuffling) {
  // Over many epochs, element 0 lands in each of 5 positions about equally often.
  std::vector<int> where(5, 0);
  for (int epoch = 0; epoch < 5000; ++epoch) {
    const auto order = epoch_order(5, true, 3, epoch);
    ++where[std::find(order.begin(), order.end(), 0) - order.begin()];
  }
  for (int count : where)
    EXPECT_NEAR(count, 1000, 150);  // binomial sd ~28
}

}  // namespace
}  // namespace gpipe::datasets::testing
