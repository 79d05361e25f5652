// The generated JPEG folder of the throughput benchmark reads back as an ImageNet folder.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(JpegFolder, WritesAnImageNetLayout) {
  TempDir dir;
  write_jpeg_folder(dir.str(), JpegFolderOptions(7).val_count(3).classes(3).width(50).height(30));
  ImageFolder train(dir.str(), Split::kTrain);
  ImageFolder val(dir.str(), Split::kTest);
  EXPECT_EQ(train.size(), 7);
  EXPECT_EQ(train.classes(), (std::vector<std::string>{"n00000000", "n00000001", "n00000002"}));
  EXPECT_EQ(val.size(), 3);
  const auto image = train.image(0);
  EXPECT_EQ(image.cols, 50);
  EXPECT_EQ(image.rows, 30);
  std::vector<int64_t> counts(3, 0);
  for (int64_t i = 0; i < train.size(); ++i)
    ++counts[train.label(i)];
  EXPECT_EQ(counts, (std::vector<int64_t>{3, 2, 2}));
}

TEST(JpegFolder, ImagesArePureFunctionsOfTheirKey) {
  const auto a = generate_photo_like(64, 48, 1, 5, 0);
  EXPECT_EQ(cv::norm(a, generate_photo_like(64, 48, 1, 5, 0), cv::NORM_INF), 0.0);
  EXPECT_GT(cv::norm(a, generate_photo_like(64, 48, 1, 6, 0), cv::NORM_INF), 0.0);
  EXPECT_GT(cv::norm(a, generate_photo_like(64, 48, 1, 5, 1), cv::NORM_INF), 0.0);
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
