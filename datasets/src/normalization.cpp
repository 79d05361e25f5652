#include "gpipe/datasets/normalization.h"

#include "gpipe/errors.h"

namespace gpipe::datasets {

const Normalization kImageNetNormalization{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
const Normalization kCifar10Normalization{{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}};
const Normalization kCifar100Normalization{{0.5071, 0.4865, 0.4409}, {0.2673, 0.2564, 0.2762}};
const Normalization kFashionMnistNormalization{{0.2860}, {0.3530}};
const Normalization kMnistNormalization{{0.1307}, {0.3081}};
const Normalization kSyntheticNormalization{{0.498}, {0.2049}};

Normalization normalization_for(const std::string& dataset, int64_t channels) {
  if (dataset == "imagenet") return kImageNetNormalization;
  if (dataset == "cifar10") return kCifar10Normalization;
  if (dataset == "cifar100") return kCifar100Normalization;
  if (dataset == "fashion-mnist") return kFashionMnistNormalization;
  if (dataset == "mnist") return kMnistNormalization;
  if (dataset == "synthetic") {
    GPIPE_CHECK(channels > 0, ConfigError, "synthetic images need channels > 0, got ", channels);
    return {std::vector<double>(channels, kSyntheticNormalization.mean[0]),
            std::vector<double>(channels, kSyntheticNormalization.std[0])};
  }
  throw ConfigError(c10::str("no normalization for dataset '", dataset,
                             "'; known: imagenet, cifar10, cifar100, fashion-mnist, mnist, "
                             "synthetic"));
}

}  // namespace gpipe::datasets
