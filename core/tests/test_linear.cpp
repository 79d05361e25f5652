// gpipe::Linear: same initialisation, outputs and gradients as torch::nn::Linear, with the
// weight gradient accumulated inside the GEMM.
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

}  // namespace
}  // namespace gpipe::testing
