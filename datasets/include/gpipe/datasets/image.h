// Reading, decoding and encoding JPEG and PNG files: the one part of the data area that needs
// OpenCV.
//
// Why this file exists: a dataset of a million JPEGs will hold a few that are empty, truncated
// or not images at all. Every read goes through here so that each failure becomes a
// BadImageError naming the file, which a dataset can then skip and count, instead of an empty
// image that crashes a transform later. Images come back as HWC uint8 in RGB order (or one
// grayscale channel), the layout every transform here takes. A build without OpenCV
// (image_codecs_available() false) has every other reader; here it throws
// ImageCodecsUnavailableError saying how to get the codecs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/datasets/hwc_image.h"

namespace gpipe::datasets {

// Whether this build decodes and encodes JPEG and PNG (it was configured with OpenCV).
bool image_codecs_available();

// The whole file. Throws BadImageError naming the path when it cannot be opened or read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// Decodes JPEG or PNG bytes into HWC uint8: 3 channels in RGB order, or 1 when `grayscale`.
// `name` is used in messages. Throws BadImageError when the bytes are not a decodable image,
// ImageCodecsUnavailableError in a build without OpenCV.
HwcImage decode_image(const std::vector<uint8_t>& bytes, const std::string& name,
                      bool grayscale = false);

// read_file_bytes then decode_image.
HwcImage read_image(const std::string& path, bool grayscale = false);

// Writes an HWC uint8 RGB or grayscale image as JPEG (.jpg/.jpeg, any case) or PNG (.png),
// chosen by the extension. Throws DataError naming the path on failure,
// ImageCodecsUnavailableError in a build without OpenCV.
void write_image(const std::string& path, const HwcImage& image, int jpeg_quality = 90);

}  // namespace gpipe::datasets
