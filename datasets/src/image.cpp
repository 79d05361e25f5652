#include "gpipe/datasets/image.h"

#include <fstream>

#include "gpipe/files.h"

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  // Only a regular file: a FIFO or a device among the images would block or never end.
  std::string text;
  try {
    text = read_file(path, "image file", int64_t{1} << 30);
  } catch (const InputError& e) {
    throw BadImageError(e.what(), path);
  }
  return std::vector<uint8_t>(text.begin(), text.end());
}

HwcImage read_image(const std::string& path, bool grayscale) {
  return decode_image(read_file_bytes(path), path, grayscale);
}

}  // namespace gpipe::datasets
