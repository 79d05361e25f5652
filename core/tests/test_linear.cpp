// gpipe::Linear and gpipe::Conv2d: same initialisation, outputs and gradients as LibTorch's
// modules; Linear accumulates its weight gradient inside the GEMM, and under autocast neither
// keeps a low-precision copy of its weight per call.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::testing {
namespace {

void compare(bool with_bias, std::vector<int64_t> input_shape) {
  torch::manual_seed(4);
  torch::nn::Linear theirs(torch::nn::LinearOptions(6, 5).bias(with_bias));
  torch::manual_seed(4);
  Linear ours(torch::nn::LinearOptions(6, 5).bias(with_bias));
  EXPECT_TRUE(torch::equal(ours->weight, theirs->weight)) << "same initialisation";
  for (int micro = 0; micro < 3; ++micro) {  // gradients accumulate over calls
    auto x1 = torch::randn(input_shape).requires_grad_(true);
    auto x2 = x1.detach().clone().requires_grad_(true);
    auto g = torch::randn_like(theirs(x1));
    const auto y_theirs = theirs(x1);
    const auto y_ours = ours(x2);
    expect_close(y_ours, y_theirs, 1e-6, 1e-6, "output");
    y_theirs.backward(g);
    y_ours.backward(g);
    expect_close(x2.grad(), x1.grad(), 1e-5, 1e-6, "input grad");
  }
  expect_close(ours->weight.grad(), theirs->weight.grad(), 1e-5, 1e-6, "weight grad");
  if (with_bias) expect_close(ours->bias.grad(), theirs->bias.grad(), 1e-5, 1e-6, "bias grad");
}

TEST(Linear, MatchesLibTorch2d) {
  compare(true, {7, 6});
}
TEST(Linear, MatchesLibTorch3dWithoutBias) {
  compare(false, {2, 3, 6});
}

TEST(Linear, FrozenWeightGetsNoGradient) {
  Linear layer(3, 2);
  layer->weight.requires_grad_(false);
  auto x = torch::randn({4, 3}, torch::requires_grad());
  layer(x).sum().backward();
  EXPECT_FALSE(layer->weight.grad().defined());
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(layer->bias.grad().defined());
}

TEST(Linear, NoGraphUnderNoGrad) {
  Linear layer(3, 2);
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(layer(torch::randn({1, 3})).requires_grad());
}

// Conv2d against torch::nn::Conv2d over three calls (gradients accumulate), with `precision`'s
// autocast around both forwards.
void compare_conv(const torch::nn::Conv2dOptions& options, Precision precision, double rtol) {
  torch::manual_seed(5);
  torch::nn::Conv2d theirs(options);
  torch::manual_seed(5);
  Conv2d ours(options);
  EXPECT_TRUE(torch::equal(ours->weight, theirs->weight)) << "same initialisation";
  for (int micro = 0; micro < 3; ++micro) {
    auto x1 = torch::randn({2, options.in_channels(), 9, 8}).requires_grad_(true);
    auto x2 = x1.detach().clone().requires_grad_(true);
    torch::Tensor y_theirs, y_ours;
    {
      AutocastGuard autocast(precision, torch::kCPU);
      y_theirs = theirs(x1);
      y_ours = ours(x2);
    }
    ASSERT_EQ(y_ours.scalar_type(), compute_dtype(precision));
    expect_close(y_ours.to(torch::kFloat), y_theirs.to(torch::kFloat), rtol, 1e-6, "output");
    auto g = torch::randn_like(y_theirs);
    y_theirs.backward(g);
    y_ours.backward(g);
    ASSERT_EQ(x2.grad().scalar_type(), torch::kFloat);
    expect_close(x2.grad(), x1.grad(), rtol, 1e-6, "input grad");
  }
  ASSERT_EQ(ours->weight.grad().scalar_type(), torch::kFloat);
  expect_close(ours->weight.grad(), theirs->weight.grad(), rtol, 1e-6, "weight grad");
  if (options.bias()) expect_close(ours->bias.grad(), theirs->bias.grad(), rtol, 1e-6, "bias grad");
}

TEST(Conv2d, MatchesLibTorch) {
  compare_conv(torch::nn::Conv2dOptions(3, 4, 3).padding(1), Precision::kFp32, 1e-5);
  compare_conv(
      torch::nn::Conv2dOptions(4, 4, {3, 1}).stride(2).padding({1, 0}).groups(4).bias(false),
      Precision::kFp32, 1e-5);
}

// The same convolution backward (at::convolution_backward) as LibTorch's autograd, fed the same
// bf16 tensors: equal to float rounding of the fp32 accumulation of the three calls.
TEST(Conv2d, MatchesLibTorchUnderBf16Autocast) {
  compare_conv(torch::nn::Conv2dOptions(3, 4, 3).padding(1), Precision::kBf16, 1e-5);
  compare_conv(torch::nn::Conv2dOptions(4, 4, 3).padding(2).dilation(2).groups(4).bias(false),
               Precision::kBf16, 1e-5);
}

// What four micro-batches' graphs hold: torch::nn::Conv2d keeps a bf16 copy of its weight per
// call, gpipe::Conv2d none (its inputs here are a hundredth of the weight's size).
TEST(Conv2d, KeepsNoWeightCopyPerMicroBatchUnderAutocast) {
  memory::install();
  const auto options = torch::nn::Conv2dOptions(128, 128, 3).padding(1).bias(false);
  const int64_t copy_bytes = 128 * 128 * 9 * 2;
  auto held_by_four_graphs = [&](auto&& conv) {
    const int64_t before = memory::host_stats().current_bytes;
    std::vector<torch::Tensor> outputs;
    for (int m = 0; m < 4; ++m) {
      AutocastGuard autocast(Precision::kBf16, torch::kCPU);
      outputs.push_back(conv(torch::randn({1, 128, 2, 2}).requires_grad_(true)));
    }
    return memory::host_stats().current_bytes - before;
  };
  const int64_t theirs = held_by_four_graphs(torch::nn::Conv2d(options));
  const int64_t ours = held_by_four_graphs(Conv2d(options));
  EXPECT_GE(theirs, 4 * copy_bytes) << "LibTorch's conv keeps a copy per call";
  EXPECT_LT(ours, copy_bytes) << "ours keeps none";
}

TEST(Conv2d, RefusesPaddingItDoesNotImplement) {
  EXPECT_THROW(Conv2d(torch::nn::Conv2dOptions(2, 2, 3).padding_mode(torch::kReflect)),
               ConfigError);
  EXPECT_THROW(Conv2d(torch::nn::Conv2dOptions(2, 2, 3).padding(torch::kSame)), ConfigError);
}

}  // namespace
}  // namespace gpipe::testing
