// make_dataset: names, defaults and the transform each dataset gets.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(Factory, SyntheticImagesAtTheRequestedSize) {
  auto data = make_dataset(
      DatasetOptions("synthetic").count(10).classes(5).channels(1).image_size(20).augment(true));
  EXPECT_EQ(data->name(), "synthetic");
  EXPECT_EQ(data->size(), 10);
  EXPECT_EQ(data->num_classes(), 5);
  EXPECT_EQ(data->channels(), 1);
  Rng rng(0);
  EXPECT_EQ(data->get(3, rng).input.sizes(), (std::vector<int64_t>{1, 20, 20}));
}

TEST(Factory, SyntheticTokens) {
  auto data = make_dataset(DatasetOptions("synthetic-tokens").count(8).seq_len(16).vocab(100));
  EXPECT_EQ(data->size(), 8);
  EXPECT_EQ(data->num_classes(), 100);
  EXPECT_EQ(data->channels(), 0);
  EXPECT_EQ(data->example_shape(), (std::vector<int64_t>{16}));
}

TEST(Factory, CifarFromAFolder) {
  TempDir dir;
  write_cifar_file(dir / "test_batch.bin", {{3}, {4}});
  auto data = make_dataset(
      DatasetOptions("cifar10").data_dir(dir.str()).split(Split::kTest).image_size(48));
  EXPECT_EQ(data->size(), 2);
  EXPECT_EQ(data->example_shape(), (std::vector<int64_t>{3, 48, 48}));
  Rng rng(0);
  EXPECT_EQ(data->get(1, rng).target.item<int64_t>(), 4);
}

TEST(Factory, TransformsFollowTheDataset) {
  const auto imagenet = make_transform_options(DatasetOptions("imagenet").augment(true));
  EXPECT_EQ(imagenet.size(), 224);
  EXPECT_TRUE(imagenet.train());
  EXPECT_EQ(imagenet.train_crop(), TrainCrop::kRandomResized);
  EXPECT_DOUBLE_EQ(imagenet.crop_fraction(), 0.875);
  const auto cifar = make_transform_options(DatasetOptions("cifar100"));
  EXPECT_EQ(cifar.size(), 32);
  EXPECT_FALSE(cifar.train());
  EXPECT_EQ(cifar.train_crop(), TrainCrop::kPadCrop);
  EXPECT_EQ(cifar.normalization().mean, kCifar100Normalization.mean);
  const auto mnist = make_transform_options(DatasetOptions("mnist").image_size(64));
  EXPECT_EQ(mnist.size(), 64);
  EXPECT_FALSE(mnist.flip());
  EXPECT_TRUE(make_transform_options(DatasetOptions("fashion-mnist")).flip());
  EXPECT_EQ(native_image_size("fashion-mnist"), 28);
}

TEST(Factory, DataFolders) {
  EXPECT_EQ(resolve_data_dir(DatasetOptions("fashion-mnist")), kDebianFashionMnistDir);
  EXPECT_EQ(resolve_data_dir(DatasetOptions("mnist").data_dir("/x")), "/x");
  expect_error<ConfigError>([] { make_dataset(DatasetOptions("imagenet")); },
                            {"imagenet", "data_dir"});
  TempDir dir;
  expect_error<DataError>(
      [&] { make_dataset(DatasetOptions("cifar100").data_dir(dir / "absent")); }, {"absent"});
}

TEST(Factory, UnknownNamesAndBadSettings) {
  expect_error<ConfigError>([] { make_dataset(DatasetOptions("svhn")); },
                            {"svhn", "imagenet", "synthetic-tokens"});
  expect_error<ConfigError>([] { make_source(DatasetOptions("synthetic-tokens")); }, {"token"});
  expect_error<ConfigError>([] { make_dataset(DatasetOptions("synthetic").image_size(-1)); },
                            {"image_size", "-1"});
  EXPECT_EQ(parse_split("val"), Split::kTest);
  expect_error<ConfigError>([] { parse_split("dev"); }, {"dev"});
}

TEST(Factory, ClassListsParseOrNameTheBadText) {
  EXPECT_EQ(parse_class_list("0-4"), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(parse_class_list("9,5-6"), (std::vector<int64_t>{9, 5, 6}));
  for (const char* bad : {"", "4-0", "1,1", "0-", "a", "1,", "-3", "0--2", "99999999999"}) {
    try {
      parse_class_list(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Factory, ClassSubsetKeepsAndRelabelsInTheGivenOrder) {
  const auto options = DatasetOptions("synthetic").count(40).classes(4).image_size(8);
  const auto whole = make_source(options);
  const auto subset = make_source(DatasetOptions(options).class_subset({3, 1}));
  EXPECT_EQ(subset->classes(),
            (std::vector<std::string>{whole->classes()[3], whole->classes()[1]}));
  int64_t kept = 0;
  for (int64_t i = 0; i < whole->size(); ++i) {
    const int64_t label = whole->label(i);
    if (label != 3 && label != 1) continue;
    ASSERT_LT(kept, subset->size());
    EXPECT_EQ(subset->label(kept), label == 3 ? 0 : 1);
    EXPECT_EQ(subset->describe(kept), whole->describe(i));
    ++kept;
  }
  EXPECT_EQ(kept, subset->size());
  EXPECT_GT(kept, 0);
  EXPECT_EQ(make_dataset(DatasetOptions(options).class_subset({3, 1}))->num_classes(), 2);
  EXPECT_THROW(make_source(DatasetOptions(options).class_subset({4})), ConfigError);
  EXPECT_THROW(make_dataset(DatasetOptions("synthetic-tokens").class_subset({0})), ConfigError);
}

TEST(Factory, FashionMnistFromDebianResizedWithOneChannel) {
  if (!fs::exists(kDebianFashionMnistDir)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto data = make_dataset(
      DatasetOptions("fashion-mnist").split(Split::kTest).image_size(32).augment(true));
  EXPECT_EQ(data->size(), 10000);
  EXPECT_EQ(data->num_classes(), 10);
  EXPECT_EQ(data->channels(), 1);
  Rng rng(0);
  EXPECT_EQ(data->get(0, rng).input.sizes(), (std::vector<int64_t>{1, 32, 32}));
}

}  // namespace
}  // namespace gpipe::datasets::testing
