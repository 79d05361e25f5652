#include "gpipe/datasets/resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {
namespace {

// One input sample of an output pixel along one axis, and its weight.
struct Tap {
  int index;
  float weight;
};

// taps[d]: the input samples of output position d, for an axis of `in` samples resized to `out`.
using Taps = std::vector<std::vector<Tap>>;

Taps area_taps(int in, int out) {
  Taps taps(out);
  const double scale = static_cast<double>(in) / out;
  for (int d = 0; d < out; ++d) {
    const double begin = d * scale;
    const double end = std::min<double>(in, (d + 1) * scale);
    for (int s = static_cast<int>(std::floor(begin)); s < end; ++s) {
      const double overlap = std::min<double>(s + 1, end) - std::max<double>(s, begin);
      if (overlap > 1e-9) taps[d].push_back({s, static_cast<float>(overlap / (end - begin))});
    }
  }
  return taps;
}

Taps linear_taps(int in, int out) {
  Taps taps(out);
  const double scale = static_cast<double>(in) / out;
  for (int d = 0; d < out; ++d) {
    const double source = (d + 0.5) * scale - 0.5;
    int left = static_cast<int>(std::floor(source));
    double fraction = source - left;
    if (left < 0) {
      left = 0;
      fraction = 0;
    }
    if (left >= in - 1) {
      left = in - 1;
      fraction = 0;
    }
    taps[d].push_back({left, static_cast<float>(1 - fraction)});
    if (fraction > 0) taps[d].push_back({left + 1, static_cast<float>(fraction)});
  }
  return taps;
}

Taps cubic_taps(int in, int out) {
  constexpr double kA = -0.75;
  const auto weight = [](double t) {
    t = std::abs(t);
    if (t <= 1) return ((kA + 2) * t - (kA + 3)) * t * t + 1;
    if (t < 2) return ((kA * t - 5 * kA) * t + 8 * kA) * t - 4 * kA;
    return 0.0;
  };
  Taps taps(out);
  const double scale = static_cast<double>(in) / out;
  for (int d = 0; d < out; ++d) {
    const double source = (d + 0.5) * scale - 0.5;
    const int left = static_cast<int>(std::floor(source));
    for (int k = -1; k <= 2; ++k) {
      const int s = std::clamp(left + k, 0, in - 1);
      taps[d].push_back({s, static_cast<float>(weight(source - (left + k)))});
    }
  }
  return taps;
}

Taps taps_for(Interpolation interpolation, int in, int out) {
  switch (interpolation) {
    case Interpolation::kArea:
      // Area averaging only shrinks; enlarging an axis by area is bilinear, as in OpenCV.
      return in >= out ? area_taps(in, out) : linear_taps(in, out);
    case Interpolation::kLinear:
      return linear_taps(in, out);
    case Interpolation::kCubic:
      return cubic_taps(in, out);
  }
  return linear_taps(in, out);
}

// The taps of every output position with the same count each (zero weights pad the short ones),
// flattened: output d reads index[d * per + k] with weight[d * per + k].
struct FlatTaps {
  int per = 0;
  std::vector<int> index;
  std::vector<float> weight;
};

FlatTaps flatten(const Taps& taps) {
  FlatTaps flat;
  for (const auto& position : taps)
    flat.per = std::max(flat.per, static_cast<int>(position.size()));
  for (const auto& position : taps) {
    for (int k = 0; k < flat.per; ++k) {
      const bool real = k < static_cast<int>(position.size());
      flat.index.push_back(real ? position[k].index : position[0].index);
      flat.weight.push_back(real ? position[k].weight : 0.0f);
    }
  }
  return flat;
}

// One input row of `width_in` pixels resampled to out.size() / kChannels pixels, in float.
// kChannels 0: `channels` at run time.
template <int kChannels>
void resample_row(const uint8_t* in, const FlatTaps& across, int channels, float* out,
                  int64_t out_size) {
  const int c_count = kChannels > 0 ? kChannels : channels;
  const int64_t width = out_size / c_count;
  for (int64_t x = 0; x < width; ++x) {
    const int* index = across.index.data() + x * across.per;
    const float* weight = across.weight.data() + x * across.per;
    for (int c = 0; c < c_count; ++c) {
      float sum = 0;
      for (int k = 0; k < across.per; ++k)
        sum += weight[k] * in[index[k] * c_count + c];
      out[x * c_count + c] = sum;
    }
  }
}

}  // namespace

HwcImage resize_image(const HwcImage& image, int width, int height, Interpolation interpolation) {
  GPIPE_CHECK(!image.empty(), DataError, "cannot resize an empty image");
  GPIPE_CHECK(width > 0 && height > 0, DataError, "cannot resize a ", image.height(), "x",
              image.width(), " image to ", height, "x", width, ": sizes must be positive");
  const int channels = image.channels();
  const FlatTaps across = flatten(taps_for(interpolation, image.width(), width));
  const Taps down = taps_for(interpolation, image.height(), height);
  // Pass 1: every input row resampled to `width` columns, in float.
  const int64_t row_size = static_cast<int64_t>(width) * channels;
  std::vector<float> rows(static_cast<size_t>(image.height() * row_size));
  for (int y = 0; y < image.height(); ++y) {
    float* out = rows.data() + y * row_size;
    if (channels == 3) {
      resample_row<3>(image.row(y), across, channels, out, row_size);
    } else if (channels == 1) {
      resample_row<1>(image.row(y), across, channels, out, row_size);
    } else {
      resample_row<0>(image.row(y), across, channels, out, row_size);
    }
  }
  // Pass 2: the columns resampled to `height` rows, rounded and clamped to uint8.
  HwcImage result(height, width, channels);
  std::vector<float> sum(static_cast<size_t>(row_size));
  for (int y = 0; y < height; ++y) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (const Tap& tap : down[y]) {
      const float* in = rows.data() + tap.index * row_size;
      for (int64_t i = 0; i < row_size; ++i)
        sum[i] += tap.weight * in[i];
    }
    uint8_t* out = result.row(y);
    for (int64_t i = 0; i < row_size; ++i)
      out[i] = static_cast<uint8_t>(std::clamp(sum[i], 0.0f, 255.0f) + 0.5f);
  }
  return result;
}

HwcImage resize_image(const HwcImage& image, int width, int height) {
  if (image.width() == width && image.height() == height) return image;
  const bool shrinking = width <= image.width() && height <= image.height();
  return resize_image(image, width, height,
                      shrinking ? Interpolation::kArea : Interpolation::kLinear);
}

}  // namespace gpipe::datasets
