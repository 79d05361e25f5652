// Synthetic images and tokens: shapes, determinism, and the learnable signal they promise.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(SyntheticImages, DeterministicLabelledImages) {
  SyntheticImages source(20, 4, 3, 16, /*seed=*/7);
  EXPECT_EQ(source.size(), 20);
  EXPECT_EQ(source.classes().size(), 4u);
  EXPECT_EQ(source.label(6), 2);
  const auto image = source.image(6);
  EXPECT_EQ(image.channels(), 3);
  EXPECT_EQ(image.height(), 16);
  EXPECT_EQ(image.width(), 16);
  EXPECT_EQ(max_abs_difference(image, source.image(6)), 0);
  EXPECT_GT(max_abs_difference(image, source.image(10)), 0);  // same class, other noise
  SyntheticImages other(20, 4, 3, 16, /*seed=*/8);
  EXPECT_GT(max_abs_difference(image, other.image(6)), 0);
}

TEST(SyntheticImages, ClassColourIsTheSignal) {
  // Images of one class share a mean colour within the noise; the noise has width 128.
  SyntheticImages source(40, 2, 1, 32);
  const auto mean = [&](int64_t i) {
    const auto image = source.image(i);
    double sum = 0;
    for (uint8_t v : image.pixels())
      sum += v;
    return sum / static_cast<double>(image.pixels().size());
  };
  for (int64_t i = 2; i < 40; i += 2) {
    EXPECT_NEAR(mean(i), mean(0), 6.0);
  }
}

TEST(SyntheticImages, BadOptions) {
  expect_error<ConfigError>([] { SyntheticImages(0, 2, 3, 8); }, {"count"});
  expect_error<ConfigError>([] { SyntheticImages(4, 2, 2, 8); }, {"channels", "2"});
  expect_error<ConfigError>([] { SyntheticImages(4, 0, 3, 8); }, {"classes"});
}

TEST(SyntheticTokens, TargetIsTheInputShiftedByOne) {
  SyntheticTokens tokens(10, 12, 50, /*seed=*/3);
  EXPECT_EQ(tokens.example_shape(), (std::vector<int64_t>{12}));
  EXPECT_EQ(tokens.num_classes(), 50);
  Rng rng(0);
  const auto example = tokens.get(4, rng);
  ASSERT_EQ(example.input.sizes(), (std::vector<int64_t>{12}));
  EXPECT_EQ(example.input.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(example.input.slice(0, 1), example.target.slice(0, 0, 11)));
  EXPECT_GE(example.input.min().item<int64_t>(), 0);
  EXPECT_LT(example.target.max().item<int64_t>(), 50);
  Rng other(99);
  EXPECT_TRUE(torch::equal(example.input, tokens.get(4, other).input));
  EXPECT_FALSE(torch::equal(example.input, tokens.get(5, other).input));
}

TEST(SyntheticTokens, MostNextTokensFollowTheRule) {
  SyntheticTokens tokens(50, 100, 1000);
  Rng rng(0);
  int64_t follow = 0, total = 0;
  for (int64_t i = 0; i < 50; ++i) {
    const auto e = tokens.get(i, rng);
    follow += ((e.input * 7 + 3) % 1000 == e.target).sum().item<int64_t>();
    total += 100;
  }
  // 3/4 by the rule, plus 1/1000 by chance; sd of the share over 5000 draws is 0.006.
  EXPECT_NEAR(static_cast<double>(follow) / total, 0.75, 0.03);
}

}  // namespace
}  // namespace gpipe::datasets::testing
