#include "gpipe/datasets/jpeg_folder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/image.h"
#include "gpipe/datasets/resize.h"
#include "gpipe/datasets/rng.h"

namespace gpipe::datasets {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPhotoStream = 0x50484f544fULL;  // "PHOTO"
constexpr double kTwoPi = 6.283185307179586;

std::string wnid(int64_t label) {
  char name[32];
  std::snprintf(name, sizeof(name), "n%08lld", static_cast<long long>(label));
  return name;
}

struct Colour {
  uint8_t rgb[3];
};

Colour random_colour(Rng& rng) {
  Colour colour;
  for (auto& channel : colour.rgb)
    channel = static_cast<uint8_t>(rng.below(256));
  return colour;
}

// Blends `colour` into pixel (y, x) with weight `coverage` in [0, 1].
void blend(HwcImage& image, int y, int x, const Colour& colour, double coverage) {
  for (int c = 0; c < 3; ++c) {
    uint8_t& pixel = image.at(y, x, c);
    pixel = static_cast<uint8_t>(std::lround(pixel + (colour.rgb[c] - pixel) * coverage));
  }
}

// A filled disc, its edge anti-aliased over about one pixel.
void fill_disc(HwcImage& image, int cx, int cy, int radius, const Colour& colour) {
  for (int y = std::max(0, cy - radius - 1); y <= std::min(image.height() - 1, cy + radius + 1);
       ++y) {
    for (int x = std::max(0, cx - radius - 1); x <= std::min(image.width() - 1, cx + radius + 1);
         ++x) {
      const double coverage = std::clamp(radius + 0.5 - std::hypot(x - cx, y - cy), 0.0, 1.0);
      if (coverage > 0) blend(image, y, x, colour, coverage);
    }
  }
}

// A filled rectangle from corner (x0, y0) to corner (x1, y1), both inclusive, clipped.
void fill_rectangle(HwcImage& image, int x0, int y0, int x1, int y1, const Colour& colour) {
  for (int y = std::max(0, y0); y <= std::min(image.height() - 1, y1); ++y) {
    for (int x = std::max(0, x0); x <= std::min(image.width() - 1, x1); ++x)
      blend(image, y, x, colour, 1.0);
  }
}

// Index `i` of an axis of length n, reflected at the ends without repeating the edge (-1 -> 1).
int reflect(int i, int n) {
  if (n == 1) return 0;
  if (i < 0) return -i;
  if (i >= n) return 2 * n - 2 - i;
  return i;
}

// Adds Gaussian noise (sd 32) smoothed by a 3x3 Gaussian (sigma 0.6), saturating at 0 and 255:
// texture that is not pure high frequency.
void add_smooth_noise(HwcImage& image, Rng& rng) {
  const int h = image.height();
  const int w = image.width();
  std::vector<float> noise(static_cast<size_t>(h) * w * 3);
  for (size_t i = 0; i < noise.size(); i += 2) {  // Box-Muller: two normals per pair of draws
    const double radius = 32.0 * std::sqrt(-2.0 * std::log(1.0 - rng.uniform()));
    const double angle = kTwoPi * rng.uniform();
    noise[i] = static_cast<float>(radius * std::cos(angle));
    if (i + 1 < noise.size()) noise[i + 1] = static_cast<float>(radius * std::sin(angle));
  }
  const float side = static_cast<float>(std::exp(-1.0 / (2 * 0.6 * 0.6)));
  const float kernel[3] = {side / (1 + 2 * side), 1 / (1 + 2 * side), side / (1 + 2 * side)};
  std::vector<float> across(noise.size());
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        float sum = 0;
        for (int k = -1; k <= 1; ++k)
          sum += kernel[k + 1] * noise[(static_cast<size_t>(y) * w + reflect(x + k, w)) * 3 + c];
        across[(static_cast<size_t>(y) * w + x) * 3 + c] = sum;
      }
    }
  }
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        float sum = 0;
        for (int k = -1; k <= 1; ++k)
          sum += kernel[k + 1] * across[(static_cast<size_t>(reflect(y + k, h)) * w + x) * 3 + c];
        uint8_t& pixel = image.at(y, x, c);
        pixel = static_cast<uint8_t>(std::clamp(std::lround(pixel + sum), 0L, 255L));
      }
    }
  }
}

void write_split(const fs::path& dir, int64_t count, const JpegFolderOptions& o, int64_t offset) {
  for (int64_t c = 0; c < o.classes(); ++c)
    fs::create_directories(dir / wnid(c));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t label = i % o.classes();
    const auto image = generate_photo_like(o.width(), o.height(), label, offset + i, o.seed());
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%06lld.JPEG", wnid(label).c_str(),
                  static_cast<long long>(i / o.classes()));
    write_image((dir / wnid(label) / name).string(), image, static_cast<int>(o.quality()));
  }
}

}  // namespace

HwcImage generate_photo_like(int64_t width, int64_t height, int64_t label, int64_t index,
                             uint64_t seed) {
  GPIPE_CHECK(width > 0 && height > 0, ConfigError, "photo-like image size must be positive, got ",
              width, "x", height);
  Rng rng(
      mix_seed({seed, kPhotoStream, static_cast<uint64_t>(label), static_cast<uint64_t>(index)}));
  // A coarse random colour grid, smoothly interpolated: the low frequencies of a photograph.
  HwcImage coarse(6, 8, 3);
  for (int y = 0; y < coarse.height(); ++y) {
    for (int x = 0; x < coarse.row_bytes(); ++x)
      coarse.row(y)[x] = static_cast<uint8_t>(rng.below(256));
  }
  HwcImage image = resize_image(coarse, static_cast<int>(width), static_cast<int>(height),
                                Interpolation::kCubic);
  // Shapes: edges and flat regions.
  const int shapes = 6 + static_cast<int>(rng.below(10));
  for (int s = 0; s < shapes; ++s) {
    const int cx = static_cast<int>(rng.below(width));
    const int cy = static_cast<int>(rng.below(height));
    const int radius = 5 + static_cast<int>(rng.below(std::max<int64_t>(1, height / 4)));
    if (rng.bernoulli(0.5)) {
      fill_disc(image, cx, cy, radius, random_colour(rng));
    } else {
      fill_rectangle(image, cx, cy, cx + radius, cy + radius / 2, random_colour(rng));
    }
  }
  add_smooth_noise(image, rng);
  return image;
}

void write_jpeg_folder(const std::string& dir, const JpegFolderOptions& o) {
  GPIPE_CHECK(o.count() > 0, ConfigError, "JPEG folder needs count > 0, got ", o.count());
  GPIPE_CHECK(o.val_count() >= 0, ConfigError, "val_count must be >= 0, got ", o.val_count());
  GPIPE_CHECK(o.classes() > 0 && o.count() >= o.classes(), ConfigError,
              "JPEG folder needs 0 < classes <= count (no empty class folder), got ", o.classes(),
              " classes for ", o.count(), " images");
  GPIPE_CHECK(o.val_count() == 0 || o.val_count() >= o.classes(), ConfigError,
              "val_count must be 0 or at least classes (", o.classes(), "), got ", o.val_count());
  GPIPE_CHECK(o.width() > 0 && o.height() > 0, ConfigError, "JPEG size must be positive, got ",
              o.width(), "x", o.height());
  GPIPE_CHECK(o.quality() >= 1 && o.quality() <= 100, ConfigError,
              "JPEG quality must be in [1, 100], got ", o.quality());
  try {
    write_split(fs::path(dir) / "train", o.count(), o, 0);
    if (o.val_count() > 0) write_split(fs::path(dir) / "val", o.val_count(), o, o.count());
  } catch (const fs::filesystem_error& e) {
    throw DataError(c10::str("cannot create folders under ", dir, ": ", error_message(e)));
  }
}

}  // namespace gpipe::datasets
