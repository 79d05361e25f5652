// ImageSource: the raw images of one split of a dataset, before any transform.
//
// Why this file exists: the file formats (IDX, CIFAR binary, ImageNet folders) and the
// synthetic generator differ only in how they produce image i and its label. Behind this one
// interface, the transforms, the Dataset the trainer sees, the pixel statistics of
// dataset_info and the benchmark are written once for all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/datasets/hwc_image.h"

namespace gpipe::datasets {

class ImageSource {
 public:
  virtual ~ImageSource() = default;

  // Number of images.
  virtual int64_t size() const = 0;
  // Class index of image `index`, in [0, classes().size()).
  virtual int64_t label(int64_t index) const = 0;
  // Image `index` as HWC uint8: 3 channels in RGB order, or 1 for grayscale sources. Safe to
  // call from several threads at once. Throws BadImageError when it cannot be decoded.
  virtual HwcImage image(int64_t index) const = 0;
  // Class names; the class index is the position.
  virtual const std::vector<std::string>& classes() const = 0;
  // Channels of every image (1 or 3).
  virtual int64_t channels() const = 0;
  // Where image `index` comes from, for messages: a path, or a file and record.
  virtual std::string describe(int64_t index) const = 0;
};

}  // namespace gpipe::datasets
