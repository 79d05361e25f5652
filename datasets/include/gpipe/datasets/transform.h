// Image transforms: training augmentation and evaluation preprocessing, on HwcImage.
//
//   Transform train(TransformOptions(224).train(true));            // ImageNet training
//   Transform eval(TransformOptions(224));                          // resize 256, centre 224
//   Transform cifar(TransformOptions(32).train(true).train_crop(TrainCrop::kPadCrop)
//                       .normalization(kCifar10Normalization));
//   torch::Tensor x = train(image, rng);                            // (C, 224, 224) float32
//
// Why this file exists: the paper trains with the Inception-style random-resized crop and flip
// and evaluates on a centre crop; CIFAR and MNIST-like data use pad-and-crop. The output size is
// a setting (224 and 480 in the paper, small sizes on CPU). Every random choice comes from the
// Rng the caller passes, so the result is a pure function of (image, options, rng state).
#pragma once

#include <torch/torch.h>

#include "gpipe/datasets/hwc_image.h"
#include "gpipe/datasets/normalization.h"
#include "gpipe/datasets/resize.h"
#include "gpipe/datasets/rng.h"

namespace gpipe::datasets {

enum class TrainCrop {
  kRandomResized,  // Inception-style: random area fraction and aspect ratio, resized to size
  kPadCrop,        // zero-pad by `padding` at native resolution, random crop back, resize
  kResize,         // no crop: resize to size x size
};

struct TransformOptions {
  /* implicit */ TransformOptions(int64_t size = 224) : size_(size) {}
  // Output height and width.
  TORCH_ARG(int64_t, size);
  // Training augmentation (random crop and flip) when true, evaluation preprocessing otherwise.
  TORCH_ARG(bool, train) = false;
  TORCH_ARG(TrainCrop, train_crop) = TrainCrop::kRandomResized;
  // Random-resized crop: range of the crop's share of the image area and of its aspect ratio
  // (width / height, drawn log-uniformly).
  TORCH_ARG(double, min_scale) = 0.08;
  TORCH_ARG(double, max_scale) = 1.0;
  TORCH_ARG(double, min_ratio) = 3.0 / 4.0;
  TORCH_ARG(double, max_ratio) = 4.0 / 3.0;
  // Pad-crop: zero padding on each side, in pixels of the native image.
  TORCH_ARG(int64_t, padding) = 4;
  // Random horizontal flip with probability 1/2 in training.
  TORCH_ARG(bool, flip) = true;
  // Cutout (DeVries and Taylor, 2017) in training: a cutout x cutout square of the output, its
  // centre anywhere in the image and clipped at the borders, set to 0 after normalisation (the
  // mean). 0: off, and no random number is drawn for it.
  TORCH_ARG(int64_t, cutout) = 0;
  // Evaluation: resize the shorter side to round(size / crop_fraction), then take the centre
  // size x size crop (0.875: 256 then 224, as for ImageNet; 1.0: resize only).
  TORCH_ARG(double, crop_fraction) = 0.875;
  // Per-channel mean and std; one entry per channel of the images transformed.
  TORCH_ARG(Normalization, normalization) = kImageNetNormalization;
};

// A crop rectangle in pixels.
struct CropBox {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// The Inception-style crop of a height x width image (torchvision's RandomResizedCrop
// algorithm: ten tries at a random area share and aspect ratio, then the centre crop of the
// whole image with the ratio clamped into range).
CropBox random_resized_crop_box(int height, int width, double min_scale, double max_scale,
                                double min_ratio, double max_ratio, Rng& rng);

// The centre crop of crop_height x crop_width (at most the image size) of a height x width
// image.
CropBox center_crop_box(int height, int width, int crop_height, int crop_width);

// The pixels of `image` inside `box`. Throws DataError when the box is empty or not inside.
HwcImage crop_image(const HwcImage& image, const CropBox& box);

// The height x width window at (x, y) of `image` padded with `padding` zero pixels on every
// side (pad-and-crop in one step: x and y in [0, 2 * padding]).
HwcImage pad_crop_image(const HwcImage& image, int padding, int x, int y);

// HWC uint8 -> (C, H, W) float32, (x / 255 - mean[c]) / std[c]; mirrored left-right when
// `mirror`. Throws ConfigError when the normalization does not have one entry per channel.
torch::Tensor to_tensor(const HwcImage& image, const Normalization& normalization,
                        bool mirror = false);

class Transform {
 public:
  explicit Transform(TransformOptions options);

  // image: HWC uint8 with 1 or 3 channels. Returns (C, size, size) float32. Draws from `rng`
  // in training mode only.
  torch::Tensor operator()(const HwcImage& image, Rng& rng) const;

  const TransformOptions& options() const { return options_; }

 private:
  TransformOptions options_;
};

}  // namespace gpipe::datasets
