// Training and evaluation transforms: crop geometry, flip, cutout, normalisation, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(RandomResizedCrop, BoxesStayInsideWithinScaleAndRatio) {
  Rng rng(3);
  for (int i = 0; i < 2000; ++i) {
    const auto box = random_resized_crop_box(375, 500, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
    ASSERT_GE(box.x, 0);
    ASSERT_GE(box.y, 0);
    ASSERT_LE(box.x + box.width, 500);
    ASSERT_LE(box.y + box.height, 375);
    const double share = static_cast<double>(box.width) * box.height / (375.0 * 500.0);
    const double ratio = static_cast<double>(box.width) / box.height;
    // Rounding to whole pixels moves share and ratio a little off the drawn values.
    EXPECT_GE(share, 0.08 * 0.95);
    EXPECT_LE(share, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.95);
    EXPECT_LE(ratio, 4.0 / 3 * 1.05);
  }
}

TEST(RandomResizedCrop, SpansTheScaleRange) {
  Rng rng(5);
  double smallest = 1, largest = 0;
  for (int i = 0; i < 2000; ++i) {
    const auto box = random_resized_crop_box(375, 500, 0.08, 1.0, 3.0 / 4, 4.0 / 3, rng);
    const double share = static_cast<double>(box.width) * box.height / (375.0 * 500.0);
    smallest = std::min(smallest, share);
    largest = std::max(largest, share);
  }
  EXPECT_LT(smallest, 0.1);
  EXPECT_GT(largest, 0.9);
}

TEST(RandomResizedCrop, FallsBackToAClampedCentreCrop) {
  // A 10x1000 strip: no crop of ratio <= 4/3 with area >= 8% fits, so the fallback is the
  // centred 10x13 box.
  Rng rng(1);
  const auto box = random_resized_crop_box(10, 1000, 0.5, 1.0, 3.0 / 4, 4.0 / 3, rng);
  EXPECT_EQ(box.height, 10);
  EXPECT_EQ(box.width, 13);
  EXPECT_EQ(box.x, (1000 - 13) / 2);
  EXPECT_EQ(box.y, 0);
}

TEST(CenterCrop, IsCentredAndClamped) {
  const auto box = center_crop_box(256, 341, 224, 224);
  EXPECT_EQ(box.x, (341 - 224) / 2);
  EXPECT_EQ(box.y, 16);
  EXPECT_EQ(box.width, 224);
  const auto clamped = center_crop_box(10, 20, 30, 30);
  EXPECT_EQ(clamped.width, 20);
  EXPECT_EQ(clamped.height, 10);
}

TEST(ToTensor, NormalisesPerChannelInRgbOrder) {
  const auto image = solid(2, 3, {0, 51, 255});
  const Normalization n{{0.0, 0.2, 0.5}, {1.0, 0.5, 0.25}};
  const auto t = to_tensor(image, n);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(t.scalar_type(), torch::kFloat32);
  EXPECT_FLOAT_EQ(t[0][1][2].item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(t[1][0][0].item<float>(), 0.0f);  // (0.2 - 0.2) / 0.5
  EXPECT_FLOAT_EQ(t[2][1][1].item<float>(), 2.0f);  // (1 - 0.5) / 0.25
}

TEST(ToTensor, MirrorReversesColumns) {
  const auto image = pattern(4, 5, 1);
  const Normalization n{{0.0}, {1.0}};
  const auto plain = to_tensor(image, n);
  const auto mirrored = to_tensor(image, n, /*mirror=*/true);
  EXPECT_TRUE(torch::equal(mirrored, plain.flip({2})));
  EXPECT_FLOAT_EQ(plain[0][2][1].item<float>(), (7 * 2 + 3 * 1) / 255.0f);
}

TEST(ToTensor, NormalizationMustMatchTheChannels) {
  expect_error<ConfigError>([] { to_tensor(pattern(4, 4, 3), kFashionMnistNormalization); },
                            {"1 means", "3 channels"});
}

TEST(Transform, EvalResizesThenCropsTheCentre) {
  // 500x375 black with a 15-pixel white border: resizing to 256 on the shorter side maps the
  // border to 10 pixels, and the centre 224 crop drops 16 on each side, so no white is left.
  auto image = solid(375, 500, {255, 255, 255});
  fill_box(image, {15, 15, 470, 345}, 0);
  Transform eval(TransformOptions(224).normalization({{0, 0, 0}, {1, 1, 1}}));
  Rng rng(0);
  const auto out = eval(image, rng);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 224, 224}));
  EXPECT_FLOAT_EQ(out.max().item<float>(), 0.0f);
  // With crop_fraction 1 (resize only) the border stays in.
  Transform whole(TransformOptions(224).crop_fraction(1.0).normalization({{0, 0, 0}, {1, 1, 1}}));
  EXPECT_GT(whole(image, rng).max().item<float>(), 0.9f);
}

TEST(Transform, EvalIsDeterministicAndIgnoresTheRng) {
  const auto image = pattern(60, 80, 3);
  Transform eval(TransformOptions(32));
  Rng a(1), b(2);
  EXPECT_TRUE(torch::equal(eval(image, a), eval(image, b)));
}

TEST(Transform, TrainIsAFunctionOfTheRng) {
  const auto image = pattern(375, 500, 3);
  Transform train(TransformOptions(64).train(true));
  Rng a(1), b(1), c(2);
  const auto x = train(image, a);
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{3, 64, 64}));
  EXPECT_TRUE(torch::equal(x, train(image, b)));
  EXPECT_FALSE(torch::equal(x, train(image, c)));
}

TEST(Transform, FlipsAboutHalfTheTime) {
  // Left half black, right half white: a flipped output is white on the left.
  auto image = solid(8, 8, {0});
  fill_box(image, {4, 0, 4, 8}, 255);
  Transform train(
      TransformOptions(8).train(true).train_crop(TrainCrop::kResize).normalization({{0}, {1}}));
  int flipped = 0;
  for (int seed = 0; seed < 400; ++seed) {
    Rng rng(seed);
    flipped += train(image, rng)[0][0][0].item<float>() > 0.5f;
  }
  EXPECT_NEAR(flipped, 200, 50);  // binomial sd 10
  Transform never(TransformOptions(8)
                      .train(true)
                      .train_crop(TrainCrop::kResize)
                      .flip(false)
                      .normalization({{0}, {1}}));
  for (int seed = 0; seed < 50; ++seed) {
    Rng rng(seed);
    EXPECT_FLOAT_EQ(never(image, rng)[0][0][0].item<float>(), 0.0f);
  }
}

TEST(Transform, CutoutZeroesOneClippedSquareAndLeavesTheStreamAloneWhenOff) {
  // A white 16x16 image normalised to 1: cutout 8 zeroes one square of at most 8x8, clipped at
  // the borders, somewhere new for each seed; the rest stays 1.
  const auto image = solid(16, 16, {255});
  const auto options =
      TransformOptions(16).train(true).train_crop(TrainCrop::kResize).normalization({{0}, {1}});
  Transform cut(TransformOptions(options).cutout(8));
  std::set<int64_t> zeroed_counts;
  for (int seed = 0; seed < 100; ++seed) {
    Rng rng(seed);
    const auto out = cut(image, rng)[0];
    const auto zero = (out == 0);
    const int64_t count = zero.sum().item<int64_t>();
    ASSERT_GE(count, 16) << seed;  // a centre in a corner still leaves a 4x4 square
    ASSERT_LE(count, 64) << seed;
    // The zeros form a rectangle: its rows times its columns.
    const int64_t rows = zero.any(1).sum().item<int64_t>();
    const int64_t columns = zero.any(0).sum().item<int64_t>();
    ASSERT_EQ(rows * columns, count) << seed;
    EXPECT_EQ((out == 1).sum().item<int64_t>(), 256 - count);
    zeroed_counts.insert(count);
  }
  EXPECT_GT(zeroed_counts.size(), 3u);
  // Off, the transform draws exactly what it drew before cutout existed.
  Transform plain(options);
  Rng a(5), b(5);
  plain(image, a);
  Transform(TransformOptions(options).cutout(0))(image, b);
  EXPECT_EQ(a.below(1000000), b.below(1000000));
  EXPECT_THROW(Transform(TransformOptions(options).cutout(-1)), ConfigError);
}

TEST(Transform, PadCropShiftsByAtMostThePadding) {
  // A white image padded by 4 with black: each output is the image shifted by -4..4 rows (and
  // columns), so its white rows run from `first` to `last` with black on one side only, and
  // every one of the nine shifts occurs.
  const auto image = solid(32, 32, {255, 255, 255});
  Transform train(TransformOptions(32)
                      .train(true)
                      .train_crop(TrainCrop::kPadCrop)
                      .padding(4)
                      .flip(false)
                      .normalization({{0, 0, 0}, {1, 1, 1}}));
  std::set<int> shifts;
  for (int seed = 0; seed < 300; ++seed) {
    Rng rng(seed);
    const auto out = train(image, rng)[0];
    const auto white_rows = (out.amax(1) > 0.5f).nonzero();
    const int first = static_cast<int>(white_rows.min().item<int64_t>());
    const int last = static_cast<int>(white_rows.max().item<int64_t>());
    ASSERT_TRUE(first == 0 || last == 31) << first << ".." << last;
    ASSERT_LE(first, 4);
    ASSERT_GE(last, 27);
    ASSERT_EQ(white_rows.size(0), last - first + 1);
    shifts.insert(first > 0 ? -first : 31 - last);
  }
  EXPECT_EQ(shifts.size(), 9u);
}

TEST(Transform, GrayscaleIsResizedAndKeepsOneChannel) {
  const auto image = pattern(28, 28, 1);
  Transform eval(TransformOptions(32).crop_fraction(1.0).normalization(kFashionMnistNormalization));
  Transform train(TransformOptions(32)
                      .train(true)
                      .train_crop(TrainCrop::kPadCrop)
                      .padding(2)
                      .normalization(kFashionMnistNormalization));
  Rng rng(0);
  EXPECT_EQ(eval(image, rng).sizes(), (std::vector<int64_t>{1, 32, 32}));
  EXPECT_EQ(train(image, rng).sizes(), (std::vector<int64_t>{1, 32, 32}));
}

TEST(Transform, BadOptionsAreConfigErrors) {
  expect_error<ConfigError>([] { Transform(TransformOptions(0)); }, {"size", "0"});
  expect_error<ConfigError>([] { Transform(TransformOptions(8).min_scale(0.5).max_scale(0.2)); },
                            {"min_scale", "0.5", "0.2"});
  expect_error<ConfigError>([] { Transform(TransformOptions(8).min_ratio(2).max_ratio(1)); },
                            {"min_ratio"});
  expect_error<ConfigError>([] { Transform(TransformOptions(8).crop_fraction(1.5)); },
                            {"crop_fraction", "1.5"});
  expect_error<ConfigError>([] { Transform(TransformOptions(8).padding(-1)); }, {"padding"});
}

}  // namespace
}  // namespace gpipe::datasets::testing
