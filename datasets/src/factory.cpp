#include "gpipe/datasets/factory.h"

#include <algorithm>

#include "gpipe/datasets/cifar.h"
#include "gpipe/datasets/class_subset.h"
#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/image_folder.h"
#include "gpipe/datasets/mnist.h"
#include "gpipe/datasets/synthetic.h"

namespace gpipe::datasets {
namespace {

void check_name(const std::string& name) {
  const auto& names = dataset_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string known;
  for (const auto& n : names)
    known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(c10::str("unknown dataset '", name, "'; known: ", known));
}

}  // namespace

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {
      "imagenet", "cifar10", "cifar100", "fashion-mnist", "mnist", "synthetic", "synthetic-tokens"};
  return names;
}

int64_t native_image_size(const std::string& name) {
  check_name(name);
  if (name == "imagenet") return 224;
  if (name == "fashion-mnist" || name == "mnist") return 28;
  return 32;
}

std::string resolve_data_dir(const DatasetOptions& options) {
  if (!options.data_dir().empty()) return options.data_dir();
  if (options.name() == "fashion-mnist") return kDebianFashionMnistDir;
  GPIPE_CHECK(options.name() == "synthetic" || options.name() == "synthetic-tokens", ConfigError,
              "dataset '", options.name(), "' needs a data folder (data_dir)");
  return "";
}

TransformOptions make_transform_options(const DatasetOptions& options) {
  const auto& name = options.name();
  check_name(name);
  GPIPE_CHECK(name != "synthetic-tokens", ConfigError, "token data has no image transform");
  const int64_t size = options.image_size() > 0 ? options.image_size() : native_image_size(name);
  GPIPE_CHECK(options.image_size() >= 0, ConfigError, "image_size must be >= 0, got ",
              options.image_size());
  auto transform = TransformOptions(size)
                       .train(options.augment())
                       .cutout(options.cutout())
                       .normalization(normalization_for(name, options.channels()));
  if (name == "imagenet") return transform.train_crop(TrainCrop::kRandomResized);
  transform.crop_fraction(1.0);
  if (name == "cifar10" || name == "cifar100") {
    return transform.train_crop(TrainCrop::kPadCrop).padding(4);
  }
  if (name == "fashion-mnist") return transform.train_crop(TrainCrop::kPadCrop).padding(2);
  if (name == "mnist") return transform.train_crop(TrainCrop::kPadCrop).padding(2).flip(false);
  return transform.train_crop(TrainCrop::kResize).flip(false);  // synthetic
}

namespace {

std::shared_ptr<ImageSource> make_whole_source(const DatasetOptions& options) {
  const auto& name = options.name();
  check_name(name);
  GPIPE_CHECK(name != "synthetic-tokens", ConfigError,
              "synthetic-tokens is token data, not an image source");
  if (name == "synthetic") {
    const int64_t size = options.image_size() > 0 ? options.image_size() : 32;
    return std::make_shared<SyntheticImages>(options.count(), options.classes(), options.channels(),
                                             size, options.seed());
  }
  const auto dir = resolve_data_dir(options);
  if (name == "imagenet") {
    return std::make_shared<ImageFolder>(dir, options.split(), options.labels_file());
  }
  if (name == "cifar10") return std::make_shared<CifarSource>(dir, options.split(), 10);
  if (name == "cifar100") return std::make_shared<CifarSource>(dir, options.split(), 100);
  return std::make_shared<MnistSource>(
      dir, options.split(),
      name == "mnist" ? MnistSource::mnist_classes() : MnistSource::fashion_mnist_classes());
}

}  // namespace

std::shared_ptr<ImageSource> make_source(const DatasetOptions& options) {
  auto source = make_whole_source(options);
  if (options.class_subset().empty()) return source;
  return std::make_shared<ClassSubset>(std::move(source), options.class_subset());
}

std::shared_ptr<Dataset> make_dataset(const DatasetOptions& options) {
  check_name(options.name());
  if (options.name() == "synthetic-tokens") {
    GPIPE_CHECK(options.class_subset().empty(), ConfigError,
                "synthetic-tokens has no classes to choose from (class_subset)");
    return std::make_shared<SyntheticTokens>(options.count(), options.seq_len(), options.vocab(),
                                             options.seed());
  }
  auto transform = make_transform_options(options);
  auto source = make_source(options);
  return std::make_shared<ImageDataset>(options.name(), std::move(source),
                                        Transform(std::move(transform)), options.skip_bad());
}

}  // namespace gpipe::datasets
