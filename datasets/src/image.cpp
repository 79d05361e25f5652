#include "gpipe/datasets/image.h"

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <initializer_list>

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

namespace {

bool starts_with(const std::vector<uint8_t>& bytes, std::initializer_list<uint8_t> magic) {
  return bytes.size() >= magic.size() && std::equal(magic.begin(), magic.end(), bytes.begin());
}

}  // namespace

cv::Mat decode_image(const std::vector<uint8_t>& bytes, const std::string& name, bool grayscale) {
  if (bytes.empty())
    throw BadImageError(c10::str("image file ", name, " is empty (0 bytes)"), name);
  // Only JPEG and PNG reach OpenCV: imdecode tries every codec it was built with on anything
  // else, and some abort the process on bad input (Debian's GDCM asserts on a corrupt DICOM
  // header; found by fuzz_image, tests/fuzz/regressions/image/).
  const bool jpeg = starts_with(bytes, {0xFF, 0xD8, 0xFF});
  const bool png = starts_with(bytes, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'});
  if (!jpeg && !png) {
    throw BadImageError(c10::str("cannot decode image ", name, " (", bytes.size(),
                                 " bytes): it does not start as a JPEG or a PNG does"),
                        name);
  }
  cv::Mat decoded;
  try {
    const cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1,
                         const_cast<uint8_t*>(bytes.data()));
    decoded = cv::imdecode(buffer, grayscale ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    throw BadImageError(
        c10::str("cannot decode image ", name, " (", bytes.size(), " bytes): ", error_message(e)),
        name);
  }
  if (decoded.empty()) {
    throw BadImageError(c10::str("cannot decode image ", name, " (", bytes.size(),
                                 " bytes): not a JPEG or PNG that OpenCV can read"),
                        name);
  }
  if (!grayscale) cv::cvtColor(decoded, decoded, cv::COLOR_BGR2RGB);
  return decoded;
}

cv::Mat read_image(const std::string& path, bool grayscale) {
  return decode_image(read_file_bytes(path), path, grayscale);
}

void write_image(const std::string& path, const cv::Mat& image, int jpeg_quality) {
  GPIPE_CHECK(
      !image.empty() && image.depth() == CV_8U && (image.channels() == 1 || image.channels() == 3),
      DataError, "write_image needs a non-empty uint8 image with 1 or 3 channels for ", path);
  std::string extension = path.substr(std::min(path.size(), path.rfind('.')));
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::vector<int> params;
  if (extension == ".jpg" || extension == ".jpeg") {
    params = {cv::IMWRITE_JPEG_QUALITY, jpeg_quality};
  } else {
    GPIPE_CHECK(extension == ".png", DataError, "write_image writes .jpg, .jpeg or .png, not ",
                path);
  }
  cv::Mat bgr;  // a new buffer: converting into a header of `image` would change the caller's
  if (image.channels() == 3) {
    cv::cvtColor(image, bgr, cv::COLOR_RGB2BGR);
  } else {
    bgr = image;
  }
  std::vector<uint8_t> encoded;
  bool ok = false;
  try {
    ok = cv::imencode(extension, bgr, encoded, params);
  } catch (const cv::Exception& e) {
    throw DataError(c10::str("cannot encode ", path, ": ", error_message(e)));
  }
  GPIPE_CHECK(ok, DataError, "cannot encode ", path);
  std::ofstream file(path, std::ios::binary);
  GPIPE_CHECK(file.good(), DataError, "cannot create ", path);
  file.write(reinterpret_cast<const char*>(encoded.data()),
             static_cast<std::streamsize>(encoded.size()));
  GPIPE_CHECK(file.good(), DataError, "cannot write ", path);
}

}  // namespace gpipe::datasets
