// Resampling and the transforms' pixel steps on tiny hand-made images, with the values OpenCV's
// INTER_AREA and INTER_LINEAR give: these run in every build, OpenCV or not.
#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

// A 4x4 one-channel image of 10 * (4y + x).
HwcImage ramp4x4() {
  HwcImage image(4, 4, 1);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x)
      image.at(y, x) = static_cast<uint8_t>(10 * (4 * y + x));
  }
  return image;
}

TEST(Resize, AreaHalvingAveragesEachTwoByTwoBlock) {
  const auto out = resize_image(ramp4x4(), 2, 2);
  EXPECT_EQ(out, HwcImage(2, 2, 1, {25, 45, 105, 125}));
}

TEST(Resize, AreaAtAFractionalScaleWeighsPartlyCoveredPixels) {
  // 3 -> 2: output 0 covers [0, 1.5) = 0 and half of 90; output 1 half of 90 and 180.
  const auto out = resize_image(HwcImage(1, 3, 1, {0, 90, 180}), 2, 1, Interpolation::kArea);
  EXPECT_EQ(out, HwcImage(1, 2, 1, {30, 150}));
}

TEST(Resize, LinearEnlargingUsesPixelCentresAndRepeatsTheEdges) {
  // Output centres 0.5, 1.5, 2.5, 3.5 sit at input -0.25, 0.25, 0.75, 1.25.
  const auto out = resize_image(HwcImage(1, 2, 1, {0, 100}), 4, 1);
  EXPECT_EQ(out, HwcImage(1, 4, 1, {0, 25, 75, 100}));
  // Each channel on its own.
  const auto rgb = resize_image(HwcImage(1, 2, 3, {0, 200, 8, 100, 0, 8}), 4, 1);
  EXPECT_EQ(rgb, HwcImage(1, 4, 3, {0, 200, 8, 25, 150, 8, 75, 50, 8, 100, 0, 8}));
}

TEST(Resize, CubicKeepsAConstantAndSameSizeIsACopy) {
  const auto out = resize_image(solid(2, 2, {77, 3}), 7, 5, Interpolation::kCubic);
  EXPECT_EQ(out, solid(5, 7, {77, 3}));
  EXPECT_EQ(resize_image(ramp4x4(), 4, 4), ramp4x4());
  expect_error<DataError>([] { resize_image(ramp4x4(), 0, 4); }, {"0", "positive"});
  expect_error<DataError>([] { resize_image(HwcImage(), 4, 4); }, {"empty"});
}

TEST(Crop, CopiesTheBoxAndRefusesOneOutside) {
  const auto out = crop_image(ramp4x4(), {1, 2, 2, 1});  // x 1, y 2, 2 wide, 1 high
  EXPECT_EQ(out, HwcImage(1, 2, 1, {90, 100}));
  expect_error<DataError>([] { crop_image(ramp4x4(), {3, 0, 2, 2}); }, {"2x2", "(3, 0)", "4x4"});
}

TEST(Crop, PadCropShiftsInZeros) {
  const HwcImage image(2, 2, 1, {1, 2, 3, 4});
  EXPECT_EQ(pad_crop_image(image, 1, 0, 0), HwcImage(2, 2, 1, {0, 0, 0, 1}));
  EXPECT_EQ(pad_crop_image(image, 1, 2, 2), HwcImage(2, 2, 1, {4, 0, 0, 0}));
  EXPECT_EQ(pad_crop_image(image, 1, 1, 1), image);
  EXPECT_EQ(pad_crop_image(image, 1, 2, 1), HwcImage(2, 2, 1, {2, 0, 4, 0}));
  expect_error<DataError>([&] { pad_crop_image(image, 1, 3, 0); }, {"(3, 0)", "[0, 2]"});
}

TEST(Transform, EvalOnAHandMadeImageGivesTheAreaMeans) {
  // 4x4 -> 2x2 (crop_fraction 1: resize only), normalised by mean 0 and std 1.
  Transform eval(TransformOptions(2).crop_fraction(1.0).normalization({{0}, {1}}));
  Rng rng(0);
  const auto out = eval(ramp4x4(), rng);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_FLOAT_EQ(out[0][0][0].item<float>(), 25 / 255.0f);
  EXPECT_FLOAT_EQ(out[0][0][1].item<float>(), 45 / 255.0f);
  EXPECT_FLOAT_EQ(out[0][1][0].item<float>(), 105 / 255.0f);
  EXPECT_FLOAT_EQ(out[0][1][1].item<float>(), 125 / 255.0f);
}

TEST(Transform, PadCropAndMirrorOnAHandMadeImage) {
  // Padding 1, no resize: every output is the 2x2 image shifted by -1..1, mirrored or not;
  // each seed's output must be one of those 18 arrangements.
  const HwcImage image(2, 2, 1, {10, 20, 30, 40});
  Transform train(TransformOptions(2)
                      .train(true)
                      .train_crop(TrainCrop::kPadCrop)
                      .padding(1)
                      .normalization({{0}, {1 / 255.0}}));
  std::set<std::vector<float>> seen;
  for (int seed = 0; seed < 200; ++seed) {
    Rng rng(seed);
    const auto out = train(image, rng).contiguous();
    std::vector<float> values(out.data_ptr<float>(), out.data_ptr<float>() + 4);
    bool found = false;
    for (int x = 0; x <= 2 && !found; ++x) {
      for (int y = 0; y <= 2 && !found; ++y) {
        const auto shifted = pad_crop_image(image, 1, x, y);
        const std::vector<float> plain(shifted.pixels().begin(), shifted.pixels().end());
        const std::vector<float> mirrored = {plain[1], plain[0], plain[3], plain[2]};
        found = values == plain || values == mirrored;
      }
    }
    ASSERT_TRUE(found) << seed;
    seen.insert(values);
  }
  EXPECT_GT(seen.size(), 9u);
}

}  // namespace
}  // namespace gpipe::datasets::testing
