// PixelStats: per-channel mean and standard deviation of raw images, and class counts.
//
// Why this file exists: dataset_info reports the pixel statistics of each split so that the
// normalisation constants (normalization.h) can be checked against the files, and a split's
// class counts so that a short or mislabelled download shows. Sums are kept in exact integers,
// so the figures do not depend on the order images were added or on how they were shared out
// between threads (merge).
#pragma once

#include <cstdint>
#include <vector>

#include "gpipe/datasets/hwc_image.h"

namespace gpipe::datasets {

class PixelStats {
 public:
  // Adds an HWC uint8 image; every image must have the same number of channels.
  void add(const HwcImage& image);
  // Adds the sums of another PixelStats (same channels).
  void merge(const PixelStats& other);

  int64_t images() const { return images_; }
  int64_t pixels() const { return pixels_; }
  int64_t channels() const { return static_cast<int64_t>(sum_.size()); }
  // Per channel, of the pixels scaled to [0, 1]; the std is the population std.
  std::vector<double> mean() const;
  std::vector<double> std() const;

 private:
  int64_t images_ = 0;
  int64_t pixels_ = 0;  // per channel
  std::vector<uint64_t> sum_;
  std::vector<uint64_t> sum_squares_;  // exact up to 2.8e14 pixels per channel
};

}  // namespace gpipe::datasets
