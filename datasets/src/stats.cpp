#include "gpipe/datasets/stats.h"

#include <algorithm>
#include <cmath>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {

void PixelStats::add(const HwcImage& image) {
  GPIPE_CHECK(!image.empty(), DataError, "PixelStats::add needs a non-empty image");
  const int channels = image.channels();
  if (sum_.empty()) {
    sum_.assign(channels, 0);
    sum_squares_.assign(channels, 0);
  }
  GPIPE_CHECK(channels == static_cast<int>(sum_.size()), DataError, "image has ", channels,
              " channels but earlier images had ", sum_.size());
  // Per-row partial sums fit easily in 64 bits (a row of 2^20 pixels of 255^2 is < 2^36).
  for (int y = 0; y < image.height(); ++y) {
    const uint8_t* row = image.row(y);
    for (int c = 0; c < channels; ++c) {
      uint64_t sum = 0;
      uint64_t squares = 0;
      for (int x = 0; x < image.width(); ++x) {
        const uint64_t v = row[x * channels + c];
        sum += v;
        squares += v * v;
      }
      sum_[c] += sum;
      sum_squares_[c] += squares;
    }
  }
  images_ += 1;
  pixels_ += static_cast<int64_t>(image.height()) * image.width();
}

void PixelStats::merge(const PixelStats& other) {
  if (other.images_ == 0) return;
  if (sum_.empty()) {
    sum_.assign(other.sum_.size(), 0);
    sum_squares_.assign(other.sum_.size(), 0);
  }
  GPIPE_CHECK(sum_.size() == other.sum_.size(), DataError, "cannot merge statistics of ",
              other.sum_.size(), "-channel images into ", sum_.size(), "-channel ones");
  for (size_t c = 0; c < sum_.size(); ++c) {
    sum_[c] += other.sum_[c];
    sum_squares_[c] += other.sum_squares_[c];
  }
  images_ += other.images_;
  pixels_ += other.pixels_;
}

std::vector<double> PixelStats::mean() const {
  std::vector<double> out;
  for (uint64_t sum : sum_)
    out.push_back(static_cast<double>(sum) / (255.0 * static_cast<double>(pixels_)));
  return out;
}

std::vector<double> PixelStats::std() const {
  std::vector<double> out;
  const auto n = static_cast<long double>(pixels_);
  for (size_t c = 0; c < sum_.size(); ++c) {
    // Population variance of the integer pixel values, from exact sums.
    const long double mean = static_cast<long double>(sum_[c]) / n;
    const long double variance = static_cast<long double>(sum_squares_[c]) / n - mean * mean;
    out.push_back(static_cast<double>(std::sqrt(std::max(variance, 0.0L)) / 255.0L));
  }
  return out;
}

}  // namespace gpipe::datasets
