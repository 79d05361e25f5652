// gpipe::max_pool2d and avg_pool2d against LibTorch's pooling: the same output and the same
// input gradient (for max pooling: the same indices), bit for bit, on every geometry, with ties,
// infinities and NaN, through the channels-last copy and through the fallback for what does not
// take it.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "gpipe/pool.h"

namespace gpipe::testing {
namespace {

using torch::nn::AvgPool2dOptions;
using torch::nn::MaxPool2dOptions;
using Pool = std::function<torch::Tensor(const torch::Tensor&)>;

torch::Tensor torch_max_pool(const torch::Tensor& input, const MaxPool2dOptions& o) {
  return torch::nn::functional::max_pool2d(
      input, torch::nn::functional::MaxPool2dFuncOptions(o.kernel_size())
                 .stride(o.stride())
                 .padding(o.padding())
                 .dilation(o.dilation())
                 .ceil_mode(o.ceil_mode()));
}

torch::Tensor torch_avg_pool(const torch::Tensor& input, const AvgPool2dOptions& o) {
  return torch::nn::functional::avg_pool2d(
      input, torch::nn::functional::AvgPool2dFuncOptions(o.kernel_size())
                 .stride(o.stride())
                 .padding(o.padding())
                 .ceil_mode(o.ceil_mode())
                 .count_include_pad(o.count_include_pad())
                 .divisor_override(o.divisor_override()));
}

// Forward and input gradient, ours and LibTorch's, for one input; a NaN compares equal to NaN.
void expect_same(const torch::Tensor& input, const Pool& ours_pool, const Pool& theirs_pool,
                 const std::string& what) {
  auto ours_in = input.detach().clone().requires_grad_();
  auto theirs_in = input.detach().clone().requires_grad_();
  const auto ours = ours_pool(ours_in);
  const auto theirs = theirs_pool(theirs_in);
  ASSERT_EQ(ours.sizes(), theirs.sizes()) << what;
  EXPECT_TRUE(torch::equal(ours.isnan(), theirs.isnan())) << what;
  EXPECT_TRUE(torch::equal(ours.nan_to_num(0), theirs.nan_to_num(0))) << what;
  const auto grad = torch::randn(theirs.sizes());
  ours.backward(grad);
  theirs.backward(grad);
  EXPECT_TRUE(torch::equal(ours_in.grad().nan_to_num(0), theirs_in.grad().nan_to_num(0))) << what;
}

void expect_same_max(const torch::Tensor& input, const MaxPool2dOptions& o,
                     const std::string& what) {
  expect_same(
      input, [&](const torch::Tensor& x) { return max_pool2d(x, o); },
      [&](const torch::Tensor& x) { return torch_max_pool(x, o); }, "max " + what);
}

void expect_same_avg(const torch::Tensor& input, const AvgPool2dOptions& o,
                     const std::string& what) {
  expect_same(
      input, [&](const torch::Tensor& x) { return avg_pool2d(x, o); },
      [&](const torch::Tensor& x) { return torch_avg_pool(x, o); }, "avg " + what);
}

// Every kernel 1-4, stride 1-3, padding up to half the kernel, ceil mode on and off, on planes
// of 1x1 to 8x25: `check` runs on each with a label; returns how many there were.
int64_t for_every_geometry(
    const std::function<void(int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode,
                             const torch::Tensor& input, const std::string& label)>& check) {
  int64_t cases = 0;
  for (int64_t kernel = 1; kernel <= 4; ++kernel)
    for (int64_t stride = 1; stride <= 3; ++stride)
      for (int64_t pad = 0; 2 * pad <= kernel; ++pad)
        for (bool ceil_mode : {false, true})
          for (int64_t h : {1, 2, 5, 8})
            for (int64_t w : {1, 3, 7, 16, 25}) {
              if (h + 2 * pad < kernel || w + 2 * pad < kernel) continue;
              // Values 0..2: ties in almost every window, to check which position wins.
              const auto input = torch::randint(0, 3, {2, 3, h, w}).to(torch::kFloat);
              check(kernel, stride, pad, ceil_mode, input,
                    "kernel " + std::to_string(kernel) + " stride " + std::to_string(stride) +
                        " pad " + std::to_string(pad) + (ceil_mode ? " ceil " : " ") +
                        std::to_string(h) + "x" + std::to_string(w));
              ++cases;
            }
  return cases;
}

TEST(Pool, MaxSameOutputAndGradientsAsTorchOnEveryGeometry) {
  torch::manual_seed(0);
  int64_t channels_last = 0;
  const auto cases = for_every_geometry([&](int64_t kernel, int64_t stride, int64_t pad,
                                            bool ceil_mode, const torch::Tensor& input,
                                            const std::string& label) {
    channels_last += pools_channels_last(input) ? 1 : 0;
    expect_same_max(
        input, MaxPool2dOptions(kernel).stride(stride).padding(pad).ceil_mode(ceil_mode), label);
  });
  EXPECT_GT(cases, 400);
  EXPECT_GT(channels_last, 400);  // all but 1x1 planes, which are channels-last already
}

TEST(Pool, AvgSameOutputAndGradientsAsTorchOnEveryGeometry) {
  torch::manual_seed(1);
  const auto cases =
      for_every_geometry([&](int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode,
                             const torch::Tensor& input, const std::string& label) {
        const auto noisy = input + torch::randn(input.sizes());  // sums that round
        for (bool include_pad : {false, true}) {
          expect_same_avg(noisy,
                          AvgPool2dOptions(kernel)
                              .stride(stride)
                              .padding(pad)
                              .ceil_mode(ceil_mode)
                              .count_include_pad(include_pad),
                          label + (include_pad ? " counting padding" : ""));
        }
      });
  EXPECT_GT(cases, 400);
  expect_same_avg(torch::randn({2, 3, 9, 9}), AvgPool2dOptions(3).padding(1).divisor_override(4),
                  "divisor 4");
}

TEST(Pool, InfinitiesAndNaNsPickTheSamePositionsAsTorch) {
  torch::manual_seed(2);
  auto input = torch::randn({2, 4, 16, 16});
  input.index_put_({0, 0}, -std::numeric_limits<float>::infinity());  // a plane of -inf
  input.index_put_({0, 1, 2, 3}, std::numeric_limits<float>::infinity());
  auto flat = input.view(-1);
  for (int64_t i : {5, 40, 41, 77, 200, 1000, 1001, 1017})
    flat[i] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(pools_channels_last(input));
  expect_same_max(input, MaxPool2dOptions(3).stride(1).padding(1), "3x3 with inf and NaN");
  expect_same_max(input, MaxPool2dOptions(2).stride(2).ceil_mode(true), "2x2 ceil");
  expect_same_avg(input, AvgPool2dOptions(3).stride(1).padding(1).count_include_pad(false),
                  "3x3 with inf and NaN");
}

TEST(Pool, AmoebaNetShapesOnTwoThreadsAndThreeDimensions) {
  torch::manual_seed(3);
  const auto max3 = MaxPool2dOptions(3).stride(1).padding(1);
  const auto avg3 = AvgPool2dOptions(3).stride(1).padding(1).count_include_pad(false);
  const int previous = at::get_num_threads();
  at::set_num_threads(2);
  expect_same_max(torch::randn({16, 64, 16, 16}), max3, "16x64x16x16, 2 threads");
  expect_same_avg(torch::randn({16, 64, 16, 16}), avg3, "16x64x16x16, 2 threads");
  at::set_num_threads(previous);
  expect_same_max(torch::randn({64, 8, 8}), max3, "3-D 64x8x8");
  expect_same_avg(torch::randn({64, 8, 8}), avg3, "3-D 64x8x8");
  expect_same_max(torch::randn({4, 32, 17, 17}), MaxPool2dOptions(3).stride(2).padding(1),
                  "3x3 stride 2");
  expect_same_avg(torch::randn({4, 256, 2, 2}), avg3, "256 channels of 2x2");
}

TEST(Pool, WhatDoesNotGoChannelsLastGoesToTorch) {
  torch::manual_seed(4);
  const auto max3 = MaxPool2dOptions(3).stride(1).padding(1);
  const auto avg3 = AvgPool2dOptions(3).stride(1).padding(1);
  const auto input = torch::randn({2, 8, 9, 9});
  const auto channels_last = input.contiguous(torch::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(pools_channels_last(input));
  EXPECT_TRUE(pools_channels_last(input.to(torch::kDouble)));
  EXPECT_FALSE(pools_channels_last(channels_last));
  EXPECT_FALSE(pools_channels_last(input.transpose(2, 3)));
  EXPECT_FALSE(pools_channels_last(input[0]));               // 3-D
  EXPECT_FALSE(pools_channels_last(input.narrow(1, 0, 1)));  // one channel
  EXPECT_FALSE(pools_channels_last(input.to(torch::kLong)));
  for (const auto& [x, what] : std::vector<std::pair<torch::Tensor, std::string>>{
           {channels_last, "channels-last"},
           {input.transpose(2, 3), "transposed"},
           {input.to(torch::kDouble), "double"},
           {input.narrow(1, 0, 1).contiguous(), "one channel"}}) {
    expect_same_max(x, max3, what);
    expect_same_avg(x, avg3, what);
  }
  expect_same_max(input, MaxPool2dOptions(3).dilation(2).padding(1), "dilation 2");
  // LibTorch's own errors for options it refuses (padding over half the kernel).
  EXPECT_THROW(max_pool2d(input, MaxPool2dOptions(2).padding(2)), c10::Error);
  EXPECT_THROW(avg_pool2d(input, AvgPool2dOptions(2).padding(2)), c10::Error);
}

TEST(Pool, ModulesMatchTorchsModules) {
  torch::manual_seed(5);
  const auto input = torch::randn({3, 5, 10, 10});
  const auto max3 = MaxPool2dOptions(3).stride(1).padding(1);
  const auto avg3 = AvgPool2dOptions(3).stride(2).padding(1).count_include_pad(false);
  MaxPool2d max_pool(max3);
  AvgPool2d avg_pool(avg3);
  EXPECT_TRUE(torch::equal(max_pool(input), torch::nn::MaxPool2d(max3)(input)));
  EXPECT_TRUE(torch::equal(avg_pool(input), torch::nn::AvgPool2d(avg3)(input)));
  std::ostringstream printed;
  printed << *max_pool << " " << *avg_pool;
  EXPECT_EQ(printed.str(),
            "gpipe::MaxPool2d(kernel_size=[3, 3], stride=[1, 1], padding=[1, 1], ceil_mode=0) "
            "gpipe::AvgPool2d(kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], ceil_mode=0, "
            "count_include_pad=0)");
}

}  // namespace
}  // namespace gpipe::testing
