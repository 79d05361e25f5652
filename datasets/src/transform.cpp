#include "gpipe/datasets/transform.h"

#include <algorithm>
#include <cmath>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {

CropBox random_resized_crop_box(int height, int width, double min_scale, double max_scale,
                                double min_ratio, double max_ratio, Rng& rng) {
  GPIPE_CHECK(height > 0 && width > 0, DataError, "cannot crop an empty image (", height, "x",
              width, ")");
  const double area = static_cast<double>(height) * width;
  const double log_min = std::log(min_ratio);
  const double log_max = std::log(max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(min_scale, max_scale);
    const double aspect = std::exp(rng.uniform(log_min, log_max));
    const int w = static_cast<int>(std::lround(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target_area / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int y = static_cast<int>(rng.below(height - h + 1));
      const int x = static_cast<int>(rng.below(width - w + 1));
      return {x, y, w, h};
    }
  }
  // Fallback: the whole image, its ratio clamped into [min_ratio, max_ratio], centred.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width;
  int h = height;
  if (in_ratio < min_ratio) {
    h = std::max(1, static_cast<int>(std::lround(width / min_ratio)));
  } else if (in_ratio > max_ratio) {
    w = std::max(1, static_cast<int>(std::lround(height * max_ratio)));
  }
  return center_crop_box(height, width, h, w);
}

CropBox center_crop_box(int height, int width, int crop_height, int crop_width) {
  crop_height = std::min(crop_height, height);
  crop_width = std::min(crop_width, width);
  return {(width - crop_width) / 2, (height - crop_height) / 2, crop_width, crop_height};
}

HwcImage crop_image(const HwcImage& image, const CropBox& box) {
  GPIPE_CHECK(box.width > 0 && box.height > 0 && box.x >= 0 && box.y >= 0 &&
                  box.x + box.width <= image.width() && box.y + box.height <= image.height(),
              DataError, "crop box ", box.width, "x", box.height, " at (", box.x, ", ", box.y,
              ") is not inside the ", image.width(), "x", image.height(), " image");
  HwcImage out(box.height, box.width, image.channels());
  const int64_t bytes = out.row_bytes();
  for (int y = 0; y < box.height; ++y) {
    const uint8_t* from = image.row(box.y + y) + static_cast<int64_t>(box.x) * image.channels();
    std::copy(from, from + bytes, out.row(y));
  }
  return out;
}

HwcImage pad_crop_image(const HwcImage& image, int padding, int x, int y) {
  GPIPE_CHECK(padding >= 0 && x >= 0 && y >= 0 && x <= 2 * padding && y <= 2 * padding, DataError,
              "pad-crop offset (", x, ", ", y, ") must be in [0, ", 2 * padding, "] for padding ",
              padding);
  const int channels = image.channels();
  HwcImage out(image.height(), image.width(), channels);  // zeros: the padding
  // Output (r, col) is input (r + y - padding, col + x - padding) where that is inside.
  const int dx = x - padding;
  const int dy = y - padding;
  const int first_col = std::max(0, -dx);
  const int last_col = std::min(image.width(), image.width() - dx);  // exclusive
  if (first_col >= last_col) return out;
  for (int r = std::max(0, -dy); r < std::min(image.height(), image.height() - dy); ++r) {
    const uint8_t* from = image.row(r + dy) + static_cast<int64_t>(first_col + dx) * channels;
    std::copy(from, from + static_cast<int64_t>(last_col - first_col) * channels,
              out.row(r) + static_cast<int64_t>(first_col) * channels);
  }
  return out;
}

torch::Tensor to_tensor(const HwcImage& image, const Normalization& normalization, bool mirror) {
  GPIPE_CHECK(!image.empty(), DataError, "to_tensor needs a non-empty image");
  const int channels = image.channels();
  GPIPE_CHECK(static_cast<int>(normalization.mean.size()) == channels &&
                  static_cast<int>(normalization.std.size()) == channels,
              ConfigError, "normalization has ", normalization.mean.size(), " means and ",
              normalization.std.size(), " stds but the image has ", channels,
              " channels; give one of each per channel");
  // One lookup table per channel: 256 entries of (v / 255 - mean) / std.
  std::vector<float> table(static_cast<size_t>(256 * channels));
  for (int c = 0; c < channels; ++c) {
    GPIPE_CHECK(normalization.std[c] > 0, ConfigError, "normalization std of channel ", c,
                " must be positive, got ", normalization.std[c]);
    for (int v = 0; v < 256; ++v) {
      table[c * 256 + v] =
          static_cast<float>((v / 255.0 - normalization.mean[c]) / normalization.std[c]);
    }
  }
  const int rows = image.height();
  const int cols = image.width();
  auto out = torch::empty({channels, rows, cols}, torch::kFloat32);
  float* dst = out.data_ptr<float>();
  const int64_t plane = static_cast<int64_t>(rows) * cols;
  for (int y = 0; y < rows; ++y) {
    const uint8_t* src = image.row(y);
    for (int c = 0; c < channels; ++c) {
      const float* lut = table.data() + c * 256;
      float* row = dst + c * plane + static_cast<int64_t>(y) * cols;
      if (mirror) {
        for (int x = 0; x < cols; ++x)
          row[cols - 1 - x] = lut[src[x * channels + c]];
      } else {
        for (int x = 0; x < cols; ++x)
          row[x] = lut[src[x * channels + c]];
      }
    }
  }
  return out;
}

Transform::Transform(TransformOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  GPIPE_CHECK(o.size() > 0, ConfigError, "transform size must be positive, got ", o.size());
  GPIPE_CHECK(0 < o.min_scale() && o.min_scale() <= o.max_scale() && o.max_scale() <= 1,
              ConfigError, "random-resized crop needs 0 < min_scale <= max_scale <= 1, got ",
              o.min_scale(), " and ", o.max_scale());
  GPIPE_CHECK(0 < o.min_ratio() && o.min_ratio() <= o.max_ratio(), ConfigError,
              "random-resized crop needs 0 < min_ratio <= max_ratio, got ", o.min_ratio(), " and ",
              o.max_ratio());
  GPIPE_CHECK(o.padding() >= 0, ConfigError, "pad-crop padding must be >= 0, got ", o.padding());
  GPIPE_CHECK(o.cutout() >= 0, ConfigError, "cutout must be >= 0 (0: off), got ", o.cutout());
  GPIPE_CHECK(0 < o.crop_fraction() && o.crop_fraction() <= 1, ConfigError,
              "crop_fraction must be in (0, 1], got ", o.crop_fraction());
}

torch::Tensor Transform::operator()(const HwcImage& image, Rng& rng) const {
  GPIPE_CHECK(!image.empty(), DataError, "cannot transform an empty image");
  const auto& o = options_;
  const int size = static_cast<int>(o.size());
  HwcImage out;
  bool mirror = false;
  if (o.train()) {
    switch (o.train_crop()) {
      case TrainCrop::kRandomResized: {
        const auto box = random_resized_crop_box(image.height(), image.width(), o.min_scale(),
                                                 o.max_scale(), o.min_ratio(), o.max_ratio(), rng);
        out = resize_image(crop_image(image, box), size, size);
        break;
      }
      case TrainCrop::kPadCrop: {
        const int pad = static_cast<int>(o.padding());
        const int y = static_cast<int>(rng.below(2 * pad + 1));
        const int x = static_cast<int>(rng.below(2 * pad + 1));
        out = resize_image(pad_crop_image(image, pad, x, y), size, size);
        break;
      }
      case TrainCrop::kResize:
        out = resize_image(image, size, size);
        break;
    }
    mirror = o.flip() && rng.bernoulli(0.5);
    if (o.cutout() > 0) {
      const int64_t y = rng.below(size);
      const int64_t x = rng.below(size);
      const int64_t half = o.cutout() / 2;
      auto tensor = to_tensor(out, o.normalization(), mirror);
      tensor
          .slice(1, std::max<int64_t>(0, y - half), std::min<int64_t>(size, y - half + o.cutout()))
          .slice(2, std::max<int64_t>(0, x - half), std::min<int64_t>(size, x - half + o.cutout()))
          .zero_();
      return tensor;
    }
  } else {
    // Shorter side to round(size / crop_fraction), then the centre size x size.
    const double shorter = std::round(size / o.crop_fraction());
    const double scale = shorter / std::min(image.height(), image.width());
    const int width = std::max(size, static_cast<int>(std::lround(image.width() * scale)));
    const int height = std::max(size, static_cast<int>(std::lround(image.height() * scale)));
    const auto resized = resize_image(image, width, height);
    out = crop_image(resized, center_crop_box(height, width, size, size));
  }
  return to_tensor(out, o.normalization(), mirror);
}

}  // namespace gpipe::datasets
