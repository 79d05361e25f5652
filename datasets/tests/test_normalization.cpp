// Per-dataset normalisation constants by name.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(Normalization, OneEntryPerChannelOfEachDataset) {
  for (const std::string name : {"imagenet", "cifar10", "cifar100"}) {
    const auto n = normalization_for(name);
    EXPECT_EQ(n.mean.size(), 3u) << name;
    EXPECT_EQ(n.std.size(), 3u) << name;
  }
  for (const std::string name : {"fashion-mnist", "mnist"}) {
    EXPECT_EQ(normalization_for(name).mean.size(), 1u) << name;
  }
  EXPECT_EQ(normalization_for("imagenet").mean, kImageNetNormalization.mean);
  EXPECT_EQ(normalization_for("fashion-mnist").std, kFashionMnistNormalization.std);
}

TEST(Normalization, SyntheticRepeatsItsFigurePerChannel) {
  const auto n = normalization_for("synthetic", 4);
  EXPECT_EQ(n.mean, std::vector<double>(4, kSyntheticNormalization.mean[0]));
  EXPECT_EQ(n.std, std::vector<double>(4, kSyntheticNormalization.std[0]));
}

TEST(Normalization, SyntheticFiguresMatchTheGenerator) {
  // The constants are the exact moments of the generator's distribution: check them on data.
  // With 200 class colours the sample mean's sd is 37 / sqrt(200) / 255 = 0.01 per channel.
  SyntheticImages source(2000, 200, 3, 16, /*seed=*/1);
  PixelStats stats;
  for (int64_t i = 0; i < source.size(); ++i)
    stats.add(source.image(i));
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(stats.mean()[c], kSyntheticNormalization.mean[0], 0.03);
    EXPECT_NEAR(stats.std()[c], kSyntheticNormalization.std[0], 0.02);
  }
}

TEST(Normalization, UnknownDatasetIsAConfigError) {
  expect_error<ConfigError>([] { normalization_for("svhn"); }, {"svhn", "known"});
}

}  // namespace
}  // namespace gpipe::datasets::testing
