// HwcImage: the data area's own image type (no OpenCV), its layout, checks and comparison.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(HwcImage, PixelsAreRowsOfInterleavedChannels) {
  const HwcImage image(2, 3, 2, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  EXPECT_EQ(image.height(), 2);
  EXPECT_EQ(image.width(), 3);
  EXPECT_EQ(image.channels(), 2);
  EXPECT_EQ(image.row_bytes(), 6);
  EXPECT_EQ(image.at(0, 1, 0), 2);
  EXPECT_EQ(image.at(1, 0, 1), 7);
  EXPECT_EQ(image.at(1, 2, 1), 11);
  EXPECT_EQ(image.row(1)[0], 6);
  EXPECT_FALSE(image.empty());
  EXPECT_TRUE(HwcImage().empty());
}

TEST(HwcImage, FillAndWrite) {
  HwcImage image(3, 2, 3, 9);
  EXPECT_EQ(image.pixels(), std::vector<uint8_t>(18, 9));
  image.at(2, 1, 2) = 200;
  EXPECT_EQ(image.pixels()[17], 200);
  EXPECT_EQ(max_abs_difference(image, HwcImage(3, 2, 3, 9)), 191);
  EXPECT_NE(image, HwcImage(3, 2, 3, 9));
  EXPECT_EQ(HwcImage(3, 2, 3, 9), HwcImage(3, 2, 3, std::vector<uint8_t>(18, 9)));
}

TEST(HwcImage, BadSizesNameTheValues) {
  expect_error<DataError>([] { HwcImage(2, 2, 3, std::vector<uint8_t>(11)); },
                          {"2x2x3", "12 bytes", "11"});
  expect_error<DataError>([] { HwcImage(-1, 2, 1); }, {"-1"});
  expect_error<DataError>([] { HwcImage(2, 2, 0); }, {"channel", "0"});
  expect_error<DataError>([] { max_abs_difference(HwcImage(2, 2, 1), HwcImage(2, 2, 3)); },
                          {"2x2x1", "2x2x3"});
}

}  // namespace
}  // namespace gpipe::datasets::testing
