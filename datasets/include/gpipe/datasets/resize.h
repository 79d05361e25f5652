// Resampling an HwcImage to another size, without OpenCV.
//
// Why this file exists: every transform ends in a resize (the random-resized crop, the
// evaluation's shorter side, MNIST's 28 to 32), and the JPEG generator smooths a coarse colour
// grid into an image. The filters follow OpenCV's INTER_AREA, INTER_LINEAR and INTER_CUBIC
// (pixel centres at +0.5, edge pixels repeated), so that results stay within a grey level or so
// of what the OpenCV-based transforms gave.
#pragma once

#include "gpipe/datasets/hwc_image.h"

namespace gpipe::datasets {

enum class Interpolation {
  kArea,    // each output pixel the mean of the input area it covers (for shrinking)
  kLinear,  // bilinear
  kCubic,   // bicubic, a = -0.75
};

// `image` resampled to width x height with `interpolation`. Throws DataError when the image is
// empty or the size is not positive.
HwcImage resize_image(const HwcImage& image, int width, int height, Interpolation interpolation);

// Resizes to width x height: area interpolation when shrinking (neither side grows), bilinear
// otherwise. Returns a copy of `image` when the size is unchanged.
HwcImage resize_image(const HwcImage& image, int width, int height);

}  // namespace gpipe::datasets
