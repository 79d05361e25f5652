// Shared helpers of the data tests: a temporary folder per test, an expect-error helper, and
// writers of small files in each format.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "gpipe/datasets/datasets.h"

namespace gpipe::datasets::testing {

namespace fs = std::filesystem;

// A fresh folder, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string name =
        info ? std::string(info->test_suite_name()) + "." + info->name() : std::string("test");
    path_ = fs::temp_directory_path() / ("gpipe_datasets_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter++) + "_" + name);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

using gpipe::testing::expect_error;

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// A uint8 HWC image whose pixel (y, x, c) is (seed + 7y + 3x + 50c) mod 256.
inline HwcImage pattern(int height, int width, int channels, int seed = 0) {
  HwcImage image(height, width, channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c)
        image.at(y, x, c) = static_cast<uint8_t>(seed + 7 * y + 3 * x + 50 * c);
    }
  }
  return image;
}

// A height x width image of one colour (one byte per channel).
inline HwcImage solid(int height, int width, const std::vector<uint8_t>& colour) {
  HwcImage image(height, width, static_cast<int>(colour.size()));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (size_t c = 0; c < colour.size(); ++c)
        image.at(y, x, static_cast<int>(c)) = colour[c];
    }
  }
  return image;
}

// Sets every channel of the pixels inside `box` to `value`.
inline void fill_box(HwcImage& image, const CropBox& box, uint8_t value) {
  for (int y = box.y; y < box.y + box.height; ++y) {
    for (int x = box.x; x < box.x + box.width; ++x) {
      for (int c = 0; c < image.channels(); ++c)
        image.at(y, x, c) = value;
    }
  }
}

// First statement of a test that writes or decodes JPEG/PNG files: skips it in a build without
// OpenCV (test_image.cpp checks that such a build refuses them with the fix in the message).
#define GPIPE_REQUIRE_IMAGE_CODECS()                                           \
  do {                                                                         \
    if (!::gpipe::datasets::image_codecs_available())                          \
      GTEST_SKIP() << "this build has no OpenCV: JPEG/PNG codecs unavailable"; \
  } while (false)

// An MNIST-style pair of IDX files for `stem` (train or t10k): image i is filled with value
// 10 * i (mod 256), label i is labels[i].
inline void write_mnist(const std::string& dir, const std::string& stem,
                        const std::vector<uint8_t>& labels, bool gzip, int side = 28) {
  fs::create_directories(dir);
  const int64_t n = static_cast<int64_t>(labels.size());
  std::vector<uint8_t> pixels;
  for (int64_t i = 0; i < n; ++i)
    pixels.insert(pixels.end(), side * side, static_cast<uint8_t>(10 * i));
  const std::string suffix = gzip ? ".gz" : "";
  write_idx(dir + "/" + stem + "-images-idx3-ubyte" + suffix, {n, side, side}, pixels, gzip);
  write_idx(dir + "/" + stem + "-labels-idx1-ubyte" + suffix, {n}, labels, gzip);
}

// One CIFAR record: label byte(s), then planes R, G, B where R = 3 * record, G = R + 1,
// B = R + 2 everywhere except pixel (0, 1), which is (1, 2, 3).
inline std::vector<uint8_t> cifar_record(const std::vector<uint8_t>& label_bytes, int record) {
  std::vector<uint8_t> out = label_bytes;
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 1024; ++p)
      out.push_back(p == 1 ? static_cast<uint8_t>(c + 1) : static_cast<uint8_t>(3 * record + c));
  }
  return out;
}

// A CIFAR file of records with the given label bytes (one vector per record).
inline void write_cifar_file(const std::string& path,
                             const std::vector<std::vector<uint8_t>>& labels, int first = 0) {
  std::vector<uint8_t> bytes;
  for (size_t r = 0; r < labels.size(); ++r) {
    const auto record = cifar_record(labels[r], first + static_cast<int>(r));
    bytes.insert(bytes.end(), record.begin(), record.end());
  }
  write_bytes(path, bytes);
}

// A tiny JPEG (or PNG, by extension) at path.
inline void write_small_image(const std::string& path, int seed = 0, int width = 20,
                              int height = 16) {
  fs::create_directories(fs::path(path).parent_path());
  write_image(path, pattern(height, width, 3, seed));
}

}  // namespace gpipe::datasets::testing
