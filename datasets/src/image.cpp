#include "gpipe/datasets/image.h"

#include <fstream>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) throw BadImageError(c10::str("cannot open image file ", path), path);
  const std::streamoff size = file.tellg();
  if (size < 0) throw BadImageError(c10::str("cannot read the size of ", path), path);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  file.seekg(0);
  if (size > 0 && !file.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw BadImageError(c10::str("cannot read image file ", path, ": read stopped at byte ",
                                 file.gcount(), " of ", size),
                        path);
  }
  return bytes;
}

HwcImage read_image(const std::string& path, bool grayscale) {
  return decode_image(read_file_bytes(path), path, grayscale);
}

}  // namespace gpipe::datasets
