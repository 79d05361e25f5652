#include "gpipe/datasets/hwc_image.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {
namespace {

int64_t checked_bytes(int height, int width, int channels) {
  GPIPE_CHECK(height >= 0 && width >= 0, DataError, "image size must be >= 0, got ", height, "x",
              width);
  GPIPE_CHECK(channels >= 1 || height * int64_t{width} == 0, DataError,
              "an image needs at least 1 channel, got ", channels);
  return static_cast<int64_t>(height) * width * std::max(channels, 0);
}

}  // namespace

HwcImage::HwcImage(int height, int width, int channels, uint8_t fill)
    : height_(height), width_(width), channels_(channels) {
  pixels_.assign(static_cast<size_t>(checked_bytes(height, width, channels)), fill);
}

HwcImage::HwcImage(int height, int width, int channels, std::vector<uint8_t> pixels)
    : height_(height), width_(width), channels_(channels), pixels_(std::move(pixels)) {
  const int64_t expected = checked_bytes(height, width, channels);
  GPIPE_CHECK(static_cast<int64_t>(pixels_.size()) == expected, DataError, "a ", height, "x", width,
              "x", channels, " image needs ", expected, " bytes, got ", pixels_.size());
}

bool HwcImage::operator==(const HwcImage& other) const {
  return height_ == other.height_ && width_ == other.width_ && channels_ == other.channels_ &&
         pixels_ == other.pixels_;
}

int max_abs_difference(const HwcImage& a, const HwcImage& b) {
  GPIPE_CHECK(a.height() == b.height() && a.width() == b.width() && a.channels() == b.channels(),
              DataError, "cannot compare a ", a.height(), "x", a.width(), "x", a.channels(),
              " image with a ", b.height(), "x", b.width(), "x", b.channels(), " one");
  int largest = 0;
  for (size_t i = 0; i < a.pixels().size(); ++i)
    largest = std::max(largest, std::abs(int{a.pixels()[i]} - int{b.pixels()[i]}));
  return largest;
}

}  // namespace gpipe::datasets
