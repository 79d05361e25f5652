// Reading, decoding and writing image files; every failure names the file.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(Image, PngRoundTripIsExactAndKeepsRgbOrder) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir dir;
  const auto image = pattern(4, 5, 3);  // R, G and B differ everywhere
  write_image(dir / "a.png", image);
  const auto back = read_image(dir / "a.png");
  ASSERT_EQ(back.channels(), 3);
  EXPECT_EQ(back, image);
  EXPECT_EQ(back.at(1, 2, 0), 7 + 6);
  EXPECT_EQ(back.at(1, 2, 2), 7 + 6 + 100);
}

TEST(Image, JpegRoundTripIsClose) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir dir;
  const auto image = solid(32, 48, {200, 100, 50});
  write_image(dir / "a.JPEG", image, 95);
  const auto back = read_image(dir / "a.JPEG");
  ASSERT_EQ(back.height(), 32);
  ASSERT_EQ(back.width(), 48);
  EXPECT_LE(max_abs_difference(back, image), 6);
  EXPECT_GT(back.at(5, 5, 0), back.at(5, 5, 2));  // red stays first
}

TEST(Image, GrayscaleDecodeHasOneChannel) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir dir;
  write_image(dir / "g.png", solid(6, 7, {77}));
  const auto back = read_image(dir / "g.png", /*grayscale=*/true);
  EXPECT_EQ(back.channels(), 1);
  EXPECT_EQ(back.at(3, 3), 77);
  EXPECT_EQ(read_image(dir / "g.png").channels(), 3);  // colour decode of a gray file
}

TEST(Image, MissingEmptyAndUndecodableFilesNameTheFile) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir dir;
  expect_error<BadImageError>([&] { read_image(dir / "none.JPEG"); },
                              {"none.JPEG", "cannot be read"});
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
  expect_error<DataError>([&] { write_image(dir / "a.png", HwcImage()); }, {"a.png"});
  expect_error<DataError>([&] { write_image(dir / "a.png", pattern(4, 4, 2)); }, {"a.png", "2"});
}

TEST(Image, WithoutOpenCvCodecsFailNamingTheFixAndOtherChecksStillRun) {
  TempDir dir;
  // Checks that need no codec behave the same in every build.
  expect_error<BadImageError>([&] { decode_image({}, "empty.JPEG"); }, {"empty.JPEG", "0 bytes"});
  expect_error<BadImageError>(
      [&] {
        decode_image({'B', 'M', 0, 0}, "a.bmp");
      },
      {"a.bmp", "does not start as a JPEG or a PNG"});
  const std::vector<uint8_t> jpeg_start = {0xFF, 0xD8, 0xFF, 0xE0, 0, 0};
  if (image_codecs_available()) {
    write_image(dir / "a.png", pattern(3, 4, 3));
    EXPECT_EQ(read_image(dir / "a.png"), pattern(3, 4, 3));
    EXPECT_THROW(decode_image(jpeg_start, "cut.jpg"), BadImageError);
    return;
  }
  // A build without OpenCV: a JPEG is not a bad image (skip_bad must not skip it) but a
  // configuration error that names the file and how to get the codecs.
  expect_error<ImageCodecsUnavailableError>([&] { decode_image(jpeg_start, "cut.jpg"); },
                                            {"cut.jpg", "no OpenCV", "libopencv-dev"});
  expect_error<ImageCodecsUnavailableError>([&] { write_image(dir / "a.png", pattern(3, 4, 3)); },
                                            {".png", "no OpenCV"});
  EXPECT_FALSE(std::filesystem::exists(dir / "a.png"));
  try {
    decode_image(jpeg_start, "x.jpg");
  } catch (const BadImageError&) {
    ADD_FAILURE() << "a missing codec was reported as a bad image";
  } catch (const ConfigError&) {
  }
}

}  // namespace
}  // namespace gpipe::datasets::testing
