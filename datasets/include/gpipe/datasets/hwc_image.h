// HwcImage: an image as height x width x channels uint8 pixels, rows one after another.
//
// Why this file exists: the sources, transforms and pixel statistics of the data area pass
// images around, and only JPEG/PNG decoding needs OpenCV. With an image type of the project's
// own, everything but the codecs (image.h) builds on a machine that has LibTorch and no OpenCV,
// such as a GPU machine training on synthetic, IDX or CIFAR data. Channels are interleaved
// (HWC): 3 in RGB order, or 1 for grayscale; any count >= 1 is allowed.
#pragma once

#include <cstdint>
#include <vector>

namespace gpipe::datasets {

class HwcImage {
 public:
  // An empty image (0 x 0 x 0).
  HwcImage() = default;
  // height x width x channels, every byte `fill`. Throws DataError for a negative size or a
  // channel count below 1 (when the image is not empty).
  HwcImage(int height, int width, int channels, uint8_t fill = 0);
  // Takes `pixels` (height * width * channels bytes, HWC). Throws DataError on a size mismatch.
  HwcImage(int height, int width, int channels, std::vector<uint8_t> pixels);

  int height() const { return height_; }
  int width() const { return width_; }
  int channels() const { return channels_; }
  bool empty() const { return pixels_.empty(); }
  // Bytes in one row: width * channels.
  int64_t row_bytes() const { return static_cast<int64_t>(width_) * channels_; }

  uint8_t* data() { return pixels_.data(); }
  const uint8_t* data() const { return pixels_.data(); }
  uint8_t* row(int y) { return pixels_.data() + y * row_bytes(); }
  const uint8_t* row(int y) const { return pixels_.data() + y * row_bytes(); }
  // Pixel (y, x), channel c; unchecked.
  uint8_t& at(int y, int x, int c = 0) { return row(y)[x * channels_ + c]; }
  uint8_t at(int y, int x, int c = 0) const { return row(y)[x * channels_ + c]; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }

  // Same size, channels and pixels.
  bool operator==(const HwcImage& other) const;
  bool operator!=(const HwcImage& other) const { return !(*this == other); }

 private:
  int height_ = 0;
  int width_ = 0;
  int channels_ = 0;
  std::vector<uint8_t> pixels_;
};

// The largest absolute difference between two pixels of a and b (0: equal). Throws DataError
// when their sizes or channel counts differ.
int max_abs_difference(const HwcImage& a, const HwcImage& b);

}  // namespace gpipe::datasets
