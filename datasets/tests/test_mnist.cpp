// MNIST-style IDX folders: generated ones for the format and the errors, and the real
// Fashion-MNIST that Debian's dataset-fashion-mnist installs.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(Mnist, ReadsPlainAndGzippedSplits) {
  TempDir dir;
  write_mnist(dir.str(), "train", {3, 1, 4, 1, 5}, /*gzip=*/false);
  write_mnist(dir.str(), "t10k", {9, 2}, /*gzip=*/true);
  MnistSource train(dir.str(), Split::kTrain, MnistSource::mnist_classes());
  MnistSource test(dir.str(), Split::kTest, MnistSource::mnist_classes());
  ASSERT_EQ(train.size(), 5);
  ASSERT_EQ(test.size(), 2);
  EXPECT_EQ(train.label(2), 4);
  EXPECT_EQ(test.label(0), 9);
  EXPECT_EQ(train.channels(), 1);
  const auto image = train.image(3);
  EXPECT_EQ(image.height(), 28);
  EXPECT_EQ(image.width(), 28);
  EXPECT_EQ(image.channels(), 1);
  EXPECT_EQ(image.at(5, 7), 30);  // image i is filled with 10 i
  EXPECT_NE(test.images_path().find(".gz"), std::string::npos);
  EXPECT_NE(train.describe(3).find("image 3"), std::string::npos);
}

TEST(Mnist, LabelOutOfRangeNamesFileAndOffset) {
  TempDir dir;
  write_mnist(dir.str(), "train", {1, 2, 10, 3}, false);
  expect_error<DataError>(
      [&] { MnistSource(dir.str(), Split::kTrain, MnistSource::mnist_classes()); },
      {"train-labels-idx1-ubyte", "label 10", "image 2", "byte offset 10", "[0, 10)"});
}

TEST(Mnist, ImageAndLabelCountsMustAgree) {
  TempDir dir;
  write_mnist(dir.str(), "train", {1, 2, 3}, false);
  write_idx(dir / "train-labels-idx1-ubyte", {2}, {1, 2}, false);
  expect_error<DataError>(
      [&] { MnistSource(dir.str(), Split::kTrain, MnistSource::mnist_classes()); },
      {"3 images", "2 labels"});
}

TEST(Mnist, TruncatedGzippedImagesNameTheFile) {
  TempDir dir;
  write_mnist(dir.str(), "train", std::vector<uint8_t>(50, 1), true);
  const auto path = dir / "train-images-idx3-ubyte.gz";
  auto bytes = read_bytes(path);
  bytes.resize(bytes.size() - 20);
  write_bytes(path, bytes);
  expect_error<DataError>(
      [&] { MnistSource(dir.str(), Split::kTrain, MnistSource::mnist_classes()); },
      {"train-images-idx3-ubyte.gz"});
}

TEST(Mnist, MissingFolderAndMissingFile) {
  TempDir dir;
  expect_error<DataError>(
      [&] { MnistSource(dir / "absent", Split::kTrain, MnistSource::mnist_classes()); },
      {"absent", "does not exist"});
  write_mnist(dir.str(), "train", {1}, false);
  expect_error<DataError>(
      [&] { MnistSource(dir.str(), Split::kTest, MnistSource::mnist_classes()); },
      {"t10k", "images", "t10k-images-idx3-ubyte.gz"});
}

// The real data, where the Debian package is installed.
class FashionMnist : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(std::string(kDebianFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << kDebianFashionMnistDir << ")";
    }
  }
};

TEST_F(FashionMnist, DebianPackageHas60000And10000BalancedImages) {
  for (auto [split, count] : {std::pair{Split::kTrain, 60000}, std::pair{Split::kTest, 10000}}) {
    MnistSource source(kDebianFashionMnistDir, split, MnistSource::fashion_mnist_classes());
    ASSERT_EQ(source.size(), count);
    std::vector<int64_t> per_class(10, 0);
    for (int64_t i = 0; i < source.size(); ++i)
      ++per_class[source.label(i)];
    EXPECT_EQ(per_class, std::vector<int64_t>(10, count / 10)) << to_string(split);
    EXPECT_EQ(source.image(0).height(), 28);
  }
}

TEST_F(FashionMnist, NormalizationConstantsMatchTheTrainingPixels) {
  MnistSource source(kDebianFashionMnistDir, Split::kTrain, MnistSource::fashion_mnist_classes());
  PixelStats stats;
  for (int64_t i = 0; i < source.size(); ++i)
    stats.add(source.image(i));
  // The constants are given to 4 decimals.
  EXPECT_NEAR(stats.mean()[0], kFashionMnistNormalization.mean[0], 5e-5);
  EXPECT_NEAR(stats.std()[0], kFashionMnistNormalization.std[0], 5e-5);
}

}  // namespace
}  // namespace gpipe::datasets::testing
