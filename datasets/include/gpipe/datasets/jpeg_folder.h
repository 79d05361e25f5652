// Writes a folder of generated JPEGs in the ILSVRC-2012 layout.
//
// Why this file exists: the loader's throughput must be measurable, and reproducible from a
// clean clone, on images like ImageNet's (500x375 JPEGs of ~100 KB) without the 150 GB of
// ImageNet. The images are smooth random colour fields with noise and shapes, so that they
// compress and decode like photographs rather than like flat colour or pure noise; they are a
// pure function of (seed, class, index). Tests use small ones as fixtures.
#pragma once

#include <torch/torch.h>

#include <string>

#include "gpipe/datasets/hwc_image.h"

namespace gpipe::datasets {

struct JpegFolderOptions {
  /* implicit */ JpegFolderOptions(int64_t count) : count_(count) {}
  // Training images in all (spread evenly over the classes).
  TORCH_ARG(int64_t, count);
  // Validation images in all; written as val/<wnid>/ class folders.
  TORCH_ARG(int64_t, val_count) = 0;
  // Class folders, named n00000000, n00000001, ...
  TORCH_ARG(int64_t, classes) = 5;
  TORCH_ARG(int64_t, width) = 500;
  TORCH_ARG(int64_t, height) = 375;
  TORCH_ARG(int64_t, quality) = 90;
  TORCH_ARG(uint64_t, seed) = 0;
};

// The generated image `index` of class `label` (HWC uint8 RGB, height x width).
HwcImage generate_photo_like(int64_t width, int64_t height, int64_t label, int64_t index,
                             uint64_t seed);

// Writes <dir>/train/<wnid>/<wnid>_<i>.JPEG (and val/ likewise), creating the folders.
// Throws ConfigError for bad options and DataError when a file cannot be written.
void write_jpeg_folder(const std::string& dir, const JpegFolderOptions& options);

}  // namespace gpipe::datasets
