#include "gpipe/datasets/jpeg_folder.h"

#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <filesystem>

#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/image.h"
#include "gpipe/datasets/rng.h"

namespace gpipe::datasets {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPhotoStream = 0x50484f544fULL;  // "PHOTO"

std::string wnid(int64_t label) {
  char name[32];
  std::snprintf(name, sizeof(name), "n%08lld", static_cast<long long>(label));
  return name;
}

cv::Scalar random_colour(Rng& rng) {
  return cv::Scalar(static_cast<double>(rng.below(256)), static_cast<double>(rng.below(256)),
                    static_cast<double>(rng.below(256)));
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

cv::Mat generate_photo_like(int64_t width, int64_t height, int64_t label, int64_t index,
                            uint64_t seed) {
  Rng rng(
      mix_seed({seed, kPhotoStream, static_cast<uint64_t>(label), static_cast<uint64_t>(index)}));
  // A coarse random colour grid, smoothly interpolated: the low frequencies of a photograph.
  cv::Mat coarse(6, 8, CV_8UC3);
  for (int y = 0; y < coarse.rows; ++y) {
    for (int x = 0; x < coarse.cols * 3; ++x)
      coarse.ptr<uint8_t>(y)[x] = static_cast<uint8_t>(rng.below(256));
  }
  cv::Mat image;
  cv::resize(coarse, image, cv::Size(static_cast<int>(width), static_cast<int>(height)), 0, 0,
             cv::INTER_CUBIC);
  // Shapes: edges and flat regions.
  const int shapes = 6 + static_cast<int>(rng.below(10));
  for (int s = 0; s < shapes; ++s) {
    const cv::Point centre(static_cast<int>(rng.below(width)), static_cast<int>(rng.below(height)));
    const int radius = 5 + static_cast<int>(rng.below(std::max<int64_t>(1, height / 4)));
    if (rng.bernoulli(0.5)) {
      cv::circle(image, centre, radius, random_colour(rng), cv::FILLED, cv::LINE_AA);
    } else {
      const cv::Point corner(centre.x + radius, centre.y + radius / 2);
      cv::rectangle(image, centre, corner, random_colour(rng), cv::FILLED, cv::LINE_AA);
    }
  }
  // Texture: Gaussian noise, smoothed a little so it is not pure high frequency.
  cv::Mat noise(image.size(), CV_16SC3);
  cv::RNG noise_rng(rng.next());  // not cv::randn: that draws from OpenCV's global generator
  noise_rng.fill(noise, cv::RNG::NORMAL, cv::Scalar::all(0), cv::Scalar::all(32));
  cv::GaussianBlur(noise, noise, cv::Size(3, 3), 0.6);
  cv::Mat mixed;
  image.convertTo(mixed, CV_16SC3);
  mixed += noise;
  mixed.convertTo(image, CV_8UC3);
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
