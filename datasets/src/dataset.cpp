#include "gpipe/datasets/dataset.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {

ImageDataset::ImageDataset(std::string name, std::shared_ptr<const ImageSource> source,
                           Transform transform, bool skip_bad)
    : name_(std::move(name)),
      source_(std::move(source)),
      transform_(std::move(transform)),
      skip_bad_(skip_bad) {
  GPIPE_CHECK(source_ != nullptr, ConfigError, "ImageDataset '", name_, "' needs a source");
  const auto& normalization = transform_.options().normalization();
  GPIPE_CHECK(static_cast<int64_t>(normalization.mean.size()) == source_->channels(), ConfigError,
              "dataset '", name_, "' has ", source_->channels(),
              " channels but its normalization has ", normalization.mean.size(), " entries");
}

int64_t ImageDataset::num_classes() const {
  return static_cast<int64_t>(source_->classes().size());
}

std::vector<int64_t> ImageDataset::example_shape() const {
  const int64_t size = transform_.options().size();
  return {source_->channels(), size, size};
}

Example ImageDataset::get(int64_t index, Rng& rng) const {
  const int64_t n = source_->size();
  GPIPE_CHECK(index >= 0 && index < n, ConfigError, "example index ", index,
              " out of range for dataset '", name_, "' of ", n, " examples");
  for (int64_t attempt = 0; attempt < n; ++attempt) {
    const int64_t i = (index + attempt) % n;
    HwcImage image;
    try {
      image = source_->image(i);
    } catch (const BadImageError& e) {
      if (!skip_bad_) throw;
      std::lock_guard<std::mutex> lock(mutex_);
      auto at = std::lower_bound(skipped_.begin(), skipped_.end(), e.path());
      if (at == skipped_.end() || *at != e.path()) {
        skipped_.insert(at, e.path());
        spdlog::warn("skipping undecodable image ({} skipped so far): {}", skipped_.size(),
                     e.what());
      }
      continue;
    }
    return {transform_(image, rng), torch::tensor(source_->label(i), torch::kInt64)};
  }
  throw DataError(c10::str("dataset '", name_, "': none of its ", n,
                           " images could be decoded (skip_bad skipped them all)"));
}

std::vector<std::string> ImageDataset::skipped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return skipped_;
}

}  // namespace gpipe::datasets
