// The project's resize against OpenCV's, which the transforms used before they had their own:
// on random images of several sizes, every filter stays within one grey level of cv::resize
// with the matching interpolation (rounding differs: OpenCV's fixed-point bilinear and its
// rounding of halves). Compiled only where OpenCV is found (datasets/tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

HwcImage random_image(int height, int width, int channels, uint64_t seed) {
  torch::manual_seed(seed);
  const auto pixels = torch::randint(0, 256, {height * width * channels}, torch::kUInt8);
  const auto* p = pixels.data_ptr<uint8_t>();
  return HwcImage(height, width, channels, std::vector<uint8_t>(p, p + pixels.numel()));
}

HwcImage opencv_resize(const HwcImage& image, int width, int height, int interpolation) {
  const cv::Mat in(image.height(), image.width(), CV_8UC(image.channels()),
                   const_cast<uint8_t*>(image.data()));
  cv::Mat out;
  cv::resize(in, out, cv::Size(width, height), 0, 0, interpolation);
  const auto* p = out.ptr<uint8_t>();
  return HwcImage(height, width, image.channels(),
                  std::vector<uint8_t>(p, p + out.total() * out.elemSize()));
}

struct Case {
  int height, width, to_height, to_width;
};

TEST(ResizeAgainstOpenCv, EveryFilterWithinOneGreyLevel) {
  const std::vector<Case> cases = {{64, 48, 32, 24}, {375, 500, 224, 224}, {37, 53, 20, 11},
                                   {28, 28, 32, 32}, {20, 30, 45, 70},     {33, 17, 33, 17}};
  const std::vector<std::pair<Interpolation, int>> filters = {
      {Interpolation::kArea, cv::INTER_AREA},
      {Interpolation::kLinear, cv::INTER_LINEAR},
      {Interpolation::kCubic, cv::INTER_CUBIC}};
  uint64_t seed = 0;
  for (const auto& c : cases) {
    for (const int channels : {1, 3}) {
      const auto image = random_image(c.height, c.width, channels, ++seed);
      for (const auto& [ours, theirs] : filters) {
        const bool shrinks = c.to_height <= c.height && c.to_width <= c.width;
        if (ours == Interpolation::kArea && !shrinks) continue;  // area is for shrinking
        const auto got = resize_image(image, c.to_width, c.to_height, ours);
        const auto want = opencv_resize(image, c.to_width, c.to_height, theirs);
        EXPECT_LE(max_abs_difference(got, want), 1)
            << c.height << "x" << c.width << "x" << channels << " -> " << c.to_height << "x"
            << c.to_width << " filter " << static_cast<int>(ours);
      }
    }
  }
}

}  // namespace
}  // namespace gpipe::datasets::testing
