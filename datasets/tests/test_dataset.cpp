// ImageDataset: transformed examples, and skipping undecodable images when asked to.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

// train/ with two classes of three images; the second image of class n01 is not a JPEG.
std::shared_ptr<ImageFolder> folder_with_a_bad_image(const TempDir& root) {
  for (int i = 0; i < 3; ++i) {
    write_small_image(root / ("train/n00/" + std::to_string(i) + ".JPEG"), i);
    if (i != 1) write_small_image(root / ("train/n01/" + std::to_string(i) + ".JPEG"), 10 + i);
  }
  write_bytes(root / "train/n01/1.JPEG", {'G', 'I', 'F', '8', '9', 'a'});
  return std::make_shared<ImageFolder>(root.str(), Split::kTrain);
}

TEST(ImageDataset, ReturnsTransformedExamplesAndLabels) {
  auto source = std::make_shared<SyntheticImages>(12, 3, 3, 40);
  ImageDataset data("synthetic", source,
                    Transform(TransformOptions(24).normalization(normalization_for("synthetic"))));
  EXPECT_EQ(data.size(), 12);
  EXPECT_EQ(data.num_classes(), 3);
  EXPECT_EQ(data.channels(), 3);
  EXPECT_EQ(data.example_shape(), (std::vector<int64_t>{3, 24, 24}));
  Rng rng(0);
  const auto example = data.get(5, rng);
  EXPECT_EQ(example.input.sizes(), (std::vector<int64_t>{3, 24, 24}));
  EXPECT_EQ(example.target.item<int64_t>(), 2);
  EXPECT_EQ(example.target.scalar_type(), torch::kInt64);
  expect_error<ConfigError>([&] { data.get(12, rng); }, {"index 12", "12 examples"});
}

TEST(ImageDataset, NormalizationMustMatchTheSourceChannels) {
  auto source = std::make_shared<SyntheticImages>(4, 2, 1, 8);
  expect_error<ConfigError>([&] { ImageDataset("gray", source, Transform(TransformOptions(8))); },
                            {"1 channels", "3 entries"});
}

TEST(ImageDataset, UndecodableImageFailsByDefaultNamingTheFile) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  ImageDataset data("imagenet", folder_with_a_bad_image(root), Transform(TransformOptions(8)));
  Rng rng(0);
  expect_error<BadImageError>([&] { data.get(4, rng); }, {"n01/1.JPEG", "cannot decode"});
}

TEST(ImageDataset, SkipBadReplacesTheImageWithTheNextAndCountsIt) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  auto source = folder_with_a_bad_image(root);
  ImageDataset data("imagenet", source, Transform(TransformOptions(8)), /*skip_bad=*/true);
  for (int repeat = 0; repeat < 2; ++repeat) {
    Rng a(0), b(0);
    const auto got = data.get(4, a);  // bad: replaced by image 5
    const auto expected = data.get(5, b);
    EXPECT_TRUE(torch::equal(got.input, expected.input));
    EXPECT_EQ(got.target.item<int64_t>(), 1);
  }
  const auto skipped = data.skipped();
  ASSERT_EQ(skipped.size(), 1u);  // counted once however often it is met
  EXPECT_NE(skipped[0].find("n01/1.JPEG"), std::string::npos);
}

TEST(ImageDataset, SkipBadWithNothingDecodableIsAnError) {
  TempDir root;
  write_bytes(root / "train/n00/a.JPEG", {1, 2, 3});
  write_bytes(root / "train/n00/b.JPEG", {4, 5, 6});
  ImageDataset data("imagenet", std::make_shared<ImageFolder>(root.str(), Split::kTrain),
                    Transform(TransformOptions(8)), /*skip_bad=*/true);
  Rng rng(0);
  expect_error<DataError>([&] { data.get(0, rng); }, {"none of its 2 images"});
  EXPECT_EQ(data.skipped().size(), 2u);
}

}  // namespace
}  // namespace gpipe::datasets::testing
