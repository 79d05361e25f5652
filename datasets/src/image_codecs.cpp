// JPEG and PNG decoding and encoding. The only translation unit of the data area that uses
// OpenCV: CMake defines GPIPE_WITH_OPENCV to 1 for it (and links OpenCV) when OpenCV is found,
// to 0 otherwise, and this file's one #if picks the codec or the error that says how to get one.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <initializer_list>

#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/image.h"

#if GPIPE_WITH_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#endif

namespace gpipe::datasets {
namespace {

bool starts_with(const std::vector<uint8_t>& bytes, std::initializer_list<uint8_t> magic) {
  return bytes.size() >= magic.size() && std::equal(magic.begin(), magic.end(), bytes.begin());
}

// The extension of `path`, lower case, with its dot ("" when none).
std::string lower_extension(const std::string& path) {
  std::string extension = path.substr(std::min(path.size(), path.rfind('.')));
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension;
}

#if GPIPE_WITH_OPENCV

constexpr bool kCodecs = true;

// Swaps the first and third channel of every pixel: OpenCV's BGR to our RGB and back.
void swap_red_blue(uint8_t* pixels, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    std::swap(pixels[3 * i], pixels[3 * i + 2]);
}

// Bytes already known to start as a JPEG or PNG -> HWC RGB (or gray); an empty image on failure.
HwcImage decode_bytes(const std::vector<uint8_t>& bytes, const std::string& name, bool grayscale) {
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
  if (decoded.empty() || decoded.depth() != CV_8U) return {};
  if (!decoded.isContinuous()) decoded = decoded.clone();
  const uint8_t* begin = decoded.ptr<uint8_t>(0);
  HwcImage image(decoded.rows, decoded.cols, decoded.channels(),
                 std::vector<uint8_t>(begin, begin + decoded.total() * decoded.elemSize()));
  if (image.channels() == 3) swap_red_blue(image.data(), decoded.total());
  return image;
}

// `image` (1 or 3 channels, RGB) encoded for `extension`; false when OpenCV refuses.
bool encode_bytes(const HwcImage& image, const std::string& extension, int jpeg_quality,
                  std::vector<uint8_t>& encoded) {
  std::vector<uint8_t> pixels = image.pixels();  // a copy: the channel swap must not show
  if (image.channels() == 3) swap_red_blue(pixels.data(), int64_t{image.height()} * image.width());
  const cv::Mat bgr(image.height(), image.width(), CV_8UC(image.channels()), pixels.data());
  std::vector<int> params;
  if (extension != ".png") params = {cv::IMWRITE_JPEG_QUALITY, jpeg_quality};
  try {
    return cv::imencode(extension, bgr, encoded, params);
  } catch (const cv::Exception& e) {
    throw DataError(c10::str("cannot encode ", image.width(), "x", image.height(), " image as ",
                             extension, ": ", error_message(e)));
  }
}

#else

constexpr bool kCodecs = false;

[[noreturn]] void throw_no_codecs(const std::string& what) {
  throw ImageCodecsUnavailableError(c10::str(
      "cannot ", what,
      ": this build of gpipe has no OpenCV, which decoding and encoding JPEG "
      "and PNG (ImageNet folders, --generate-jpegs) needs; install it (Debian: apt-get install "
      "libopencv-dev, or scripts/install_deps.sh) and configure again (cmake shows "
      "'gpipe: OpenCV ON'), or use a dataset that needs no codec (synthetic, mnist, "
      "fashion-mnist, cifar10, cifar100)"));
}

HwcImage decode_bytes(const std::vector<uint8_t>& /*bytes*/, const std::string& name,
                      bool /*grayscale*/) {
  throw_no_codecs("decode image " + name);
}

bool encode_bytes(const HwcImage& /*image*/, const std::string& extension, int /*jpeg_quality*/,
                  std::vector<uint8_t>& /*encoded*/) {
  throw_no_codecs("encode an image as " + extension);
}

#endif

}  // namespace

bool image_codecs_available() {
  return kCodecs;
}

namespace {

// Whether a JPEG (`jpeg`) or PNG ends as a whole file does: JPEG's last bytes, past padding
// (0x00, 0xFF, whitespace), are the end-of-image marker FF D9; PNG's last chunk, IEND, is 12
// bytes from the end (padding past it allowed).
bool ends_complete(const std::vector<uint8_t>& bytes, bool jpeg) {
  size_t end = bytes.size();
  auto padding = [](uint8_t b) {
    return b == 0x00 || b == 0xFF || b == '\r' || b == '\n' || b == ' ';
  };
  while (end > 0 && padding(bytes[end - 1]))
    --end;
  if (jpeg) return end >= 2 && bytes[end - 1] == 0xD9 && bytes[end - 2] == 0xFF;
  static const uint8_t kIend[] = {'I', 'E', 'N', 'D'};
  const size_t from = bytes.size() > 64 ? bytes.size() - 64 : 0;
  return std::search(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.end(),
                     std::begin(kIend), std::end(kIend)) != bytes.end();
}

}  // namespace

HwcImage decode_image(const std::vector<uint8_t>& bytes, const std::string& name, bool grayscale) {
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
  // A file cut short decodes partly (OpenCV fills the rest grey with only a warning): it must
  // end as its format does, with JPEG's end-of-image marker or PNG's IEND chunk.
  if (!ends_complete(bytes, jpeg)) {
    throw BadImageError(
        c10::str("cannot decode image ", name, " (", bytes.size(), " bytes): it is truncated (",
                 jpeg ? "no JPEG end-of-image marker FF D9" : "no PNG IEND chunk", " at its end)"),
        name);
  }
  HwcImage decoded = decode_bytes(bytes, name, grayscale);
  if (decoded.empty()) {
    throw BadImageError(c10::str("cannot decode image ", name, " (", bytes.size(),
                                 " bytes): not a JPEG or PNG that OpenCV can read"),
                        name);
  }
  return decoded;
}

void write_image(const std::string& path, const HwcImage& image, int jpeg_quality) {
  GPIPE_CHECK(!image.empty() && (image.channels() == 1 || image.channels() == 3), DataError,
              "write_image needs a non-empty image with 1 or 3 channels for ", path, ", got ",
              image.height(), "x", image.width(), "x", image.channels());
  const std::string extension = lower_extension(path);
  GPIPE_CHECK(extension == ".jpg" || extension == ".jpeg" || extension == ".png", DataError,
              "write_image writes .jpg, .jpeg or .png, not ", path);
  std::vector<uint8_t> encoded;
  GPIPE_CHECK(encode_bytes(image, extension, jpeg_quality, encoded), DataError, "cannot encode ",
              path);
  std::ofstream file(path, std::ios::binary);
  GPIPE_CHECK(file.good(), DataError, "cannot create ", path);
  file.write(reinterpret_cast<const char*>(encoded.data()),
             static_cast<std::streamsize>(encoded.size()));
  GPIPE_CHECK(file.good(), DataError, "cannot write ", path);
}

}  // namespace gpipe::datasets
