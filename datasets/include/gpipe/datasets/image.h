// Reading and decoding image files with OpenCV.
//
// Why this file exists: a dataset of a million JPEGs will hold a few that are empty, truncated
// or not images at all. Every read goes through here so that each failure becomes a
// BadImageError naming the file, which a dataset can then skip and count, instead of an empty
// cv::Mat that crashes a transform later. Images come back as HWC uint8 in RGB order (or one
// grayscale channel), the layout every transform here takes.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::datasets {

// The whole file. Throws BadImageError naming the path when it cannot be opened or read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// Decodes JPEG or PNG bytes into HWC uint8: 3 channels in RGB order, or 1 when `grayscale`.
// `name` is used in messages. Throws BadImageError when the bytes are not a decodable image.
cv::Mat decode_image(const std::vector<uint8_t>& bytes, const std::string& name,
                     bool grayscale = false);

// read_file_bytes then decode_image.
cv::Mat read_image(const std::string& path, bool grayscale = false);

// Writes an HWC uint8 RGB or grayscale image as JPEG (.jpg/.jpeg, any case) or PNG (.png),
// chosen by the extension. Throws DataError naming the path on failure.
void write_image(const std::string& path, const cv::Mat& image, int jpeg_quality = 90);

}  // namespace gpipe::datasets
