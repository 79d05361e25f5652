// The generic B/W split (backward_split.h): for every kind of layer, B computes the input
// gradient and no weight gradient, and B then W leaves exactly what one whole backward leaves.
// Each layer is checked twice: inside a stage (its input needs a gradient) and as the first
// layer (its input is data).
#include <gtest/gtest.h>

#include "split_check.h"
#include "test_util.h"

namespace gpipe::testing {
namespace {

// A layer under test: its forward, its parameters and those a split B computes itself.
struct Subject {
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<torch::Tensor> parameters;
  std::unordered_set<const c10::TensorImpl*> kept_in_b = {};
};

template <typename Holder>
Subject subject(Holder module) {
  return {[module](const torch::Tensor& x) mutable { return module->forward(x); },
          module->parameters(), parameters_kept_in_b(*module)};
}

// Builds the layer twice from one seed; one copy runs whole backwards, the other B then W, for
// two micro-batches (the second accumulates onto the first).
void expect_split_equals_whole(const std::function<Subject()>& make, const torch::Tensor& input,
                               bool input_needs_grad, const std::string& what) {
  SCOPED_TRACE(what + (input_needs_grad ? " (input needs a gradient)" : " (input is data)"));
  torch::manual_seed(11);
  auto whole = make();
  torch::manual_seed(11);
  auto split = make();
  for (int micro = 0; micro < 2; ++micro) {
    auto x_whole = input.clone().requires_grad_(input_needs_grad);
    auto x_split = input.clone().requires_grad_(input_needs_grad);
    const auto y_whole = whole.forward(x_whole);
    torch::manual_seed(micro);
    const auto g = torch::randn_like(y_whole);
    y_whole.backward(g);
    std::vector<torch::Tensor> expected;
    for (const auto& p : whole.parameters)
      expected.push_back(p.grad());
    expect_split_matches({split.forward(x_split)}, {g}, {x_split}, split.parameters,
                         split.kept_in_b, {x_whole.grad()}, expected, 1e-4, 1e-6);
  }
}

void both_ways(const std::function<Subject()>& make, const torch::Tensor& input,
               const std::string& what) {
  expect_split_equals_whole(make, input, /*input_needs_grad=*/true, what);
  expect_split_equals_whole(make, input, /*input_needs_grad=*/false, what);
}

TEST(BackwardSplit, Linear) {
  both_ways([] { return subject(Linear(6, 5)); }, torch::randn({7, 6}), "gpipe::Linear");
  both_ways([] { return subject(Linear(torch::nn::LinearOptions(6, 5).bias(false))); },
            torch::randn({2, 3, 6}), "gpipe::Linear without bias");
  both_ways([] { return subject(torch::nn::Linear(6, 5)); }, torch::randn({7, 6}),
            "torch::nn::Linear");
}

TEST(BackwardSplit, Convolution) {
  both_ways([] { return subject(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1))); },
            torch::randn({2, 3, 6, 6}), "Conv2d");
  // A depthwise then pointwise convolution, as AmoebaNet's separable convolutions run them.
  both_ways(
      [] {
        return subject(torch::nn::Sequential(
            torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 4, 3).padding(1).groups(4).bias(false)),
            torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 6, 1).bias(false))));
      },
      torch::randn({2, 4, 5, 5}), "separable convolution");
}

TEST(BackwardSplit, Normalisation) {
  both_ways([] { return subject(torch::nn::BatchNorm2d(4)); }, torch::randn({3, 4, 5, 5}),
            "BatchNorm2d");
  both_ways([] { return subject(DeferredBatchNorm(4)); }, torch::randn({3, 4, 5, 5}),
            "DeferredBatchNorm");
  both_ways([] { return subject(torch::nn::LayerNorm(torch::nn::LayerNormOptions({8}))); },
            torch::randn({3, 5, 8}), "LayerNorm");
}

TEST(BackwardSplit, EmbeddingTakesDataOnly) {
  expect_split_equals_whole([] { return subject(torch::nn::Embedding(10, 4)); },
                            torch::randint(0, 10, {3, 5}), /*input_needs_grad=*/false, "Embedding");
}

TEST(BackwardSplit, Attention) {
  auto make = [] {
    torch::nn::MultiheadAttention attention(torch::nn::MultiheadAttentionOptions(8, 2));
    return Subject{[attention](const torch::Tensor& x) mutable {
                     return std::get<0>(attention->forward(x, x, x));
                   },
                   attention->parameters()};
  };
  both_ways(make, torch::randn({5, 2, 8}), "MultiheadAttention");
}

TEST(BackwardSplit, AChainOfLayersAndAWeightUsedTwice) {
  both_ways(
      [] {
        return subject(
            torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)),
                                  torch::nn::BatchNorm2d(4), torch::nn::ReLU(),
                                  torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 4, 1))));
      },
      torch::randn({2, 3, 6, 6}), "conv, BatchNorm, ReLU, conv");
  // One Linear applied twice: its W must count both uses once each.
  both_ways(
      [] {
        Linear shared(5, 5);
        return Subject{
            [shared](const torch::Tensor& x) mutable { return shared(torch::relu(shared(x))); },
            shared->parameters()};
      },
      torch::randn({4, 5}), "a Linear used twice");
}

TEST(BackwardSplit, TermsOfTheWeightsAloneGoToW) {
  // A term of the weight alone joins the output: W runs its branch.
  both_ways(
      [] {
        torch::nn::Linear layer(3, 2);
        return Subject{[layer](const torch::Tensor& x) mutable {
                         return layer(x) + layer->weight.pow(2).sum();
                       },
                       layer->parameters()};
      },
      torch::randn({4, 3}), "an output plus a weight term");
  // A root of the weight alone, beside the output: W runs it whole.
  torch::nn::Linear layer(3, 2);
  auto x = torch::randn({4, 3}, torch::requires_grad());
  auto b = backward_input({layer(x), layer->weight.pow(2).sum()}, {}, {x}, layer->parameters());
  EXPECT_FALSE(layer->weight.grad().defined());
  b.weights.run();
  const auto expected = torch::ones({4, 2}).t().mm(x.detach()) + 2 * layer->weight.detach();
  expect_close(layer->weight.grad(), expected, 1e-5, 1e-6, "weight gradient");
}

TEST(BackwardSplit, AStageDefersTheWeightGradientsToW) {
  // One stage of two Linear layers and the loss: a split B leaves the weight gradients for W,
  // and B then W gives what a whole backward gives.
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
