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

TEST(Linear, SplitBackwardDefersTheWeightGradientToW) {
  // One stage of two Linear layers: a split B leaves the weight gradients for W, and B then W
  // gives what a whole backward gives.
  auto build = [] {
    torch::manual_seed(4);
    return LayerList{make_layer("a", Linear(5, 6)), make_layer("b", Linear(6, 3))};
  };
  const auto x = torch::randn({4, 5});
  const auto y = torch::randint(0, 3, {4});
  const LossFn loss = cross_entropy_loss();
  auto run = [&](const LayerList& layers, bool split) {
    Stage stage(0, 1, layers, 0, DeviceSpec::parse("cpu:0"));
    stage.begin_step(0, 1, 0);
    stage.forward(0, {x}, /*checkpoint=*/false, y, 1.0, &loss);
    stage.backward(0, {}, /*defer_weights=*/split);
    if (split) {
      for (const auto& p : stage.parameters())
        EXPECT_FALSE(p.grad().defined()) << "a weight gradient ran in B";
      stage.backward_weight(0);
    }
    return stage.parameters();
  };
  const auto whole = run(build(), false);
  const auto split = run(build(), true);
  ASSERT_EQ(whole.size(), split.size());
  for (size_t i = 0; i < whole.size(); ++i)
    expect_close(split[i].grad(), whole[i].grad(), 1e-6, 1e-7, "parameter " + std::to_string(i));
}

}  // namespace
}  // namespace gpipe::testing
