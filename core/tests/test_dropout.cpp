// Deterministic dropout: masks are a function of (seed, step, micro-batch, layer) alone.
#include <gtest/gtest.h>

#include <thread>

#include "test_util.h"

namespace gpipe::testing {
namespace {

torch::Tensor masked(uint64_t seed, int64_t step, int64_t m, int64_t layer) {
  Dropout dropout(0.5);
  LayerContext context;
  context.seed = seed;
  context.step = step;
  context.microbatch = m;
  context.layer = layer;
  LayerContextGuard guard(&context);
  return dropout(torch::ones({64}));
}

TEST(Dropout, SameKeysSameMaskOnAnyThread) {
  const auto here = masked(1, 2, 3, 4);
  torch::Tensor there;
  std::thread([&] { there = masked(1, 2, 3, 4); }).join();
  EXPECT_TRUE(torch::equal(here, there));
}

TEST(Dropout, EachKeyChangesTheMask) {
  const auto base = masked(1, 2, 3, 4);
  EXPECT_FALSE(torch::equal(base, masked(9, 2, 3, 4)));
  EXPECT_FALSE(torch::equal(base, masked(1, 9, 3, 4)));
  EXPECT_FALSE(torch::equal(base, masked(1, 2, 9, 4)));
  EXPECT_FALSE(torch::equal(base, masked(1, 2, 3, 9)));
}

TEST(Dropout, ScalesKeptUnitsAndDropsAboutP) {
  Dropout dropout(0.25);
  const auto out = dropout(torch::ones({20000}));
  const auto kept = (out > 0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.75, 0.02);
  EXPECT_NEAR(out.max().item<double>(), 1 / 0.75, 1e-6);
}

TEST(Dropout, IdentityInEvalMode) {
  Dropout dropout(0.5);
  dropout->eval();
  const auto x = torch::randn({10});
  EXPECT_TRUE(torch::equal(dropout(x), x));
}

TEST(Dropout, RejectsBadProbability) {
  EXPECT_THROW(Dropout(1.0), ConfigError);
  EXPECT_THROW(Dropout(-0.1), ConfigError);
}

TEST(DropPath, DropsWholeSamples) {
  LayerContext context;
  LayerContextGuard guard(&context);
  const auto out = drop_path(torch::ones({200, 3, 4}), 0.5, /*training=*/true);
  const auto per_sample = out.flatten(1);
  const auto all_same = (per_sample.amax(1) == per_sample.amin(1)).all();
  EXPECT_TRUE(all_same.item<bool>());
  const double dropped = (per_sample.select(1, 0) == 0).to(torch::kDouble).mean().item<double>();
  EXPECT_GT(dropped, 0.3);
  EXPECT_LT(dropped, 0.7);
  EXPECT_TRUE(torch::equal(drop_path(out, 0.5, /*training=*/false), out));
}

TEST(LayerContext, MixSeedSeparatesKeys) {
  EXPECT_NE(mix_seed(0, 0, 0, 1), mix_seed(0, 0, 1, 0));
  EXPECT_NE(mix_seed(0, 1, 0, 0), mix_seed(1, 0, 0, 0));
  EXPECT_EQ(mix_seed(3, 4, 5, 6), mix_seed(3, 4, 5, 6));
}

}  // namespace
}  // namespace gpipe::testing
