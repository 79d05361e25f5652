// The generated JPEG folder of the throughput benchmark reads back as an ImageNet folder.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(JpegFolder, WritesAnImageNetLayout) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir dir;
  write_jpeg_folder(dir.str(), JpegFolderOptions(7).val_count(3).classes(3).width(50).height(30));
  ImageFolder train(dir.str(), Split::kTrain);
  ImageFolder val(dir.str(), Split::kTest);
  EXPECT_EQ(train.size(), 7);
  EXPECT_EQ(train.classes(), (std::vector<std::string>{"n00000000", "n00000001", "n00000002"}));
  EXPECT_EQ(val.size(), 3);
  const auto image = train.image(0);
  EXPECT_EQ(image.width(), 50);
  EXPECT_EQ(image.height(), 30);
  std::vector<int64_t> counts(3, 0);
  for (int64_t i = 0; i < train.size(); ++i)
    ++counts[train.label(i)];
  EXPECT_EQ(counts, (std::vector<int64_t>{3, 2, 2}));
}

TEST(JpegFolder, ImagesArePureFunctionsOfTheirKey) {
  const auto a = generate_photo_like(64, 48, 1, 5, 0);
  EXPECT_EQ(a.height(), 48);
  EXPECT_EQ(a.width(), 64);
  EXPECT_EQ(a.channels(), 3);
  EXPECT_EQ(max_abs_difference(a, generate_photo_like(64, 48, 1, 5, 0)), 0);
  EXPECT_GT(max_abs_difference(a, generate_photo_like(64, 48, 1, 6, 0)), 0);
  EXPECT_GT(max_abs_difference(a, generate_photo_like(64, 48, 1, 5, 1)), 0);
}

TEST(JpegFolder, ImagesLookLikePhotosNotFlatColourOrPureNoise) {
  // Smooth: neighbouring pixels differ far less than random pairs do; varied: the pixel
  // values spread over much of [0, 255].
  const auto image = generate_photo_like(120, 90, 2, 3, 7);
  double neighbour = 0, spread_sum = 0, spread_squares = 0;
  int64_t pairs = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x + 1 < image.width(); ++x) {
      neighbour += std::abs(image.at(y, x, 1) - image.at(y, x + 1, 1));
      spread_sum += image.at(y, x, 1);
      spread_squares += image.at(y, x, 1) * image.at(y, x, 1);
      ++pairs;
    }
  }
  const double mean = spread_sum / pairs;
  const double sd = std::sqrt(spread_squares / pairs - mean * mean);
  EXPECT_GT(sd, 30.0);
  EXPECT_LT(neighbour / pairs, sd);
}

TEST(JpegFolder, BadOptions) {
  TempDir dir;
  expect_error<ConfigError>([&] { write_jpeg_folder(dir.str(), JpegFolderOptions(0)); }, {"count"});
  expect_error<ConfigError>([&] { write_jpeg_folder(dir.str(), JpegFolderOptions(2).classes(3)); },
                            {"3 classes", "2 images"});
  expect_error<ConfigError>(
      [&] { write_jpeg_folder(dir.str(), JpegFolderOptions(4).classes(2).quality(0)); },
      {"quality"});
}

}  // namespace
}  // namespace gpipe::datasets::testing
