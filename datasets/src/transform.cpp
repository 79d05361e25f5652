#include "gpipe/datasets/transform.h"

#include <opencv2/imgproc.hpp>

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

cv::Mat resize_image(const cv::Mat& image, int width, int height) {
  if (image.cols == width && image.rows == height) return image;
  cv::Mat out;
  const bool shrinking = width <= image.cols && height <= image.rows;
  cv::resize(image, out, cv::Size(width, height), 0, 0,
             shrinking ? cv::INTER_AREA : cv::INTER_LINEAR);
  return out;
}

torch::Tensor to_tensor(const cv::Mat& image, const Normalization& normalization, bool mirror) {
  GPIPE_CHECK(!image.empty() && image.depth() == CV_8U, DataError,
              "to_tensor needs a non-empty uint8 image");
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
  const int rows = image.rows;
  const int cols = image.cols;
  auto out = torch::empty({channels, rows, cols}, torch::kFloat32);
  float* dst = out.data_ptr<float>();
  const int64_t plane = static_cast<int64_t>(rows) * cols;
  for (int y = 0; y < rows; ++y) {
    const uint8_t* src = image.ptr<uint8_t>(y);
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

torch::Tensor Transform::operator()(const cv::Mat& image, Rng& rng) const {
  GPIPE_CHECK(!image.empty(), DataError, "cannot transform an empty image");
  const auto& o = options_;
  const int size = static_cast<int>(o.size());
  cv::Mat out;
  bool mirror = false;
  if (o.train()) {
    switch (o.train_crop()) {
      case TrainCrop::kRandomResized: {
        const auto box = random_resized_crop_box(image.rows, image.cols, o.min_scale(),
                                                 o.max_scale(), o.min_ratio(), o.max_ratio(), rng);
        out = resize_image(image(cv::Rect(box.x, box.y, box.width, box.height)), size, size);
        break;
      }
      case TrainCrop::kPadCrop: {
        const int pad = static_cast<int>(o.padding());
        cv::Mat padded;
        cv::copyMakeBorder(image, padded, pad, pad, pad, pad, cv::BORDER_CONSTANT, cv::Scalar());
        const int y = static_cast<int>(rng.below(2 * pad + 1));
        const int x = static_cast<int>(rng.below(2 * pad + 1));
        out = resize_image(padded(cv::Rect(x, y, image.cols, image.rows)), size, size);
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
    const double scale = shorter / std::min(image.rows, image.cols);
    const int width = std::max(size, static_cast<int>(std::lround(image.cols * scale)));
    const int height = std::max(size, static_cast<int>(std::lround(image.rows * scale)));
    const auto resized = resize_image(image, width, height);
    const auto box = center_crop_box(height, width, size, size);
    out = resized(cv::Rect(box.x, box.y, box.width, box.height));
  }
  return to_tensor(out, o.normalization(), mirror);
}

}  // namespace gpipe::datasets
