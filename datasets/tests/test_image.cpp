// Reading, decoding and writing image files; every failure names the file.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(Image, PngRoundTripIsExactAndKeepsRgbOrder) {
  TempDir dir;
  cv::Mat image(4, 5, CV_8UC3, cv::Scalar(10, 20, 30));  // R=10, G=20, B=30 in our RGB order
  write_image(dir / "a.png", image);
  const auto back = read_image(dir / "a.png");
  ASSERT_EQ(back.type(), CV_8UC3);
  EXPECT_EQ(cv::norm(back, image, cv::NORM_INF), 0.0);
  EXPECT_EQ(back.at<cv::Vec3b>(0, 0)[0], 10);
  EXPECT_EQ(back.at<cv::Vec3b>(0, 0)[2], 30);
}

TEST(Image, JpegRoundTripIsClose) {
  TempDir dir;
  cv::Mat image(32, 48, CV_8UC3, cv::Scalar(200, 100, 50));
  write_image(dir / "a.JPEG", image, 95);
  const auto back = read_image(dir / "a.JPEG");
  ASSERT_EQ(back.size(), image.size());
  EXPECT_LE(cv::norm(back, image, cv::NORM_INF), 6.0);
  EXPECT_GT(back.at<cv::Vec3b>(5, 5)[0], back.at<cv::Vec3b>(5, 5)[2]);  // red stays first
}

TEST(Image, GrayscaleDecodeHasOneChannel) {
  TempDir dir;
  write_image(dir / "g.png", cv::Mat(6, 7, CV_8UC1, cv::Scalar(77)));
  const auto back = read_image(dir / "g.png", /*grayscale=*/true);
  EXPECT_EQ(back.channels(), 1);
  EXPECT_EQ(back.at<uint8_t>(3, 3), 77);
  EXPECT_EQ(read_image(dir / "g.png").channels(), 3);  // colour decode of a gray file
}

TEST(Image, MissingEmptyAndUndecodableFilesNameTheFile) {
  TempDir dir;
  expect_error<BadImageError>([&] { read_image(dir / "none.JPEG"); }, {"none.JPEG", "cannot open"});
  write_bytes(dir / "empty.JPEG", {});
  expect_error<BadImageError>([&] { read_image(dir / "empty.JPEG"); }, {"empty.JPEG", "0 bytes"});
  write_bytes(dir / "text.JPEG", {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  expect_error<BadImageError>([&] { read_image(dir / "text.JPEG"); },
                              {"text.JPEG", "cannot decode", "12 bytes"});
  // Only JPEG and PNG reach a decoder: a BMP, and bytes that other codecs OpenCV carries would
  // take (a DICOM tag after a broken PNG signature, on which GDCM aborts), are refused.
  write_bytes(dir / "a.bmp", {'B', 'M', 0, 0, 0, 0});
  expect_error<BadImageError>([&] { read_image(dir / "a.bmp"); },
                              {"a.bmp", "does not start as a JPEG or a PNG"});
  std::vector<uint8_t> dicom(136, 0);
  dicom[0] = 0x89;
  for (size_t i = 0; i < 4; ++i)
    dicom[128 + i] = static_cast<uint8_t>("DICM"[i]);
  write_bytes(dir / "dicom.png", dicom);
  expect_error<BadImageError>([&] { read_image(dir / "dicom.png"); }, {"dicom.png", "136 bytes"});
  // The first 20 bytes of a real JPEG: a header and nothing to decode.
  write_image(dir / "full.jpg", pattern(64, 64, 3));
  auto bytes = read_bytes(dir / "full.jpg");
  bytes.resize(20);
  write_bytes(dir / "cut.jpg", bytes);
  try {
    read_image(dir / "cut.jpg");
    ADD_FAILURE() << "a 20-byte JPEG decoded";
  } catch (const BadImageError& e) {
    EXPECT_EQ(e.path(), dir / "cut.jpg");
    EXPECT_NE(std::string(e.what()).find("cut.jpg"), std::string::npos);
  }
}

TEST(Image, WriteRefusesUnknownExtensionAndEmptyImage) {
  TempDir dir;
  expect_error<DataError>([&] { write_image(dir / "a.bmp", pattern(4, 4, 3)); }, {"a.bmp"});
  expect_error<DataError>([&] { write_image(dir / "a.png", cv::Mat()); }, {"a.png"});
}

}  // namespace
}  // namespace gpipe::datasets::testing
