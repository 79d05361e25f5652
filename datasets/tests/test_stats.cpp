// Pixel statistics: exact per-channel mean and std, independent of how images were split.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(PixelStats, MeanAndStdOfKnownPixels) {
  // Channel 0 holds 0 and 255 in equal numbers (mean 0.5, std 0.5); channel 1 is constant 51.
  const HwcImage image(2, 2, 2, {0, 51, 255, 51, 0, 51, 255, 51});
  PixelStats stats;
  stats.add(image);
  EXPECT_EQ(stats.images(), 1);
  EXPECT_EQ(stats.pixels(), 4);
  EXPECT_DOUBLE_EQ(stats.mean()[0], 0.5);
  EXPECT_DOUBLE_EQ(stats.std()[0], 0.5);
  EXPECT_DOUBLE_EQ(stats.mean()[1], 0.2);
  EXPECT_DOUBLE_EQ(stats.std()[1], 0.0);
}

TEST(PixelStats, AgreesWithTorchOverImagesOfDifferentSizes) {
  std::vector<HwcImage> images = {pattern(10, 7, 3, 1), pattern(3, 30, 3, 2),
                                  pattern(16, 16, 3, 9)};
  PixelStats stats;
  std::vector<torch::Tensor> flat;
  for (const auto& image : images) {
    stats.add(image);
    flat.push_back(torch::from_blob(const_cast<uint8_t*>(image.data()),
                                    {image.height() * image.width(), 3}, torch::kUInt8)
                       .to(torch::kDouble));
  }
  const auto all = torch::cat(flat) / 255.0;
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(stats.mean()[c], all.select(1, c).mean().item<double>(), 1e-12);
    EXPECT_NEAR(stats.std()[c], all.select(1, c).std(/*unbiased=*/false).item<double>(), 1e-9);
  }
}

TEST(PixelStats, MergeEqualsAddingEverything) {
  PixelStats whole, left, right;
  for (int i = 0; i < 6; ++i) {
    const auto image = pattern(5 + i, 9, 1, i);
    whole.add(image);
    (i % 2 ? left : right).add(image);
  }
  left.merge(right);
  EXPECT_EQ(left.images(), whole.images());
  EXPECT_EQ(left.mean(), whole.mean());
  EXPECT_EQ(left.std(), whole.std());
}

TEST(PixelStats, ChannelCountsMustAgree) {
  PixelStats stats;
  stats.add(pattern(2, 2, 1));
  expect_error<DataError>([&] { stats.add(pattern(2, 2, 3)); }, {"3 channels", "1"});
  EXPECT_TRUE(PixelStats().mean().empty());
}

}  // namespace
}  // namespace gpipe::datasets::testing
