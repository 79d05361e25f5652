// Deferred BatchNorm: per-micro-batch statistics in training, running statistics equal to a
// plain full-batch BatchNorm's after one step, recomputes not counted.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::testing {
namespace {

// conv -> deferred BN -> relu -> flatten -> linear, split in two stages.
class ConvBnLayer : public Layer {
 public:
  ConvBnLayer() : Layer("conv_bn") {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 6, 3).padding(1)));
    norm = register_module("norm", DeferredBatchNorm(6));
  }
  Activations forward(const Activations& x) override { return {torch::relu(norm(conv(x[0])))}; }
  torch::nn::Conv2d conv{nullptr};
  DeferredBatchNorm norm{nullptr};
};

LayerList conv_net() {
  torch::manual_seed(2);
  auto first = std::make_shared<ConvBnLayer>();
  LayerList layers{first};
  layers.push_back(make_function_layer(
      "flatten", [](const Activations& x) { return Activations{x[0].flatten(1)}; }));
  layers.push_back(make_layer("fc", torch::nn::Linear(6 * 5 * 5, 4)));
  return layers;
}

void check_running_stats_equal_plain(Checkpoint checkpoint) {
  auto layers = conv_net();
  auto* bn_layer = dynamic_cast<ConvBnLayer*>(layers[0].get());
  // Reference: LibTorch's BatchNorm2d on the same conv outputs, whole batch at once.
  torch::nn::BatchNorm2d plain(6);
  torch::manual_seed(9);
  const auto x = torch::randn({16, 3, 5, 5}) * 2 + 0.5;
  const auto y = torch::randint(0, 4, {16});
  {
    torch::NoGradGuard no_grad;
    plain(bn_layer->conv(x));
  }
  Pipeline pipe(layers, PipelineOptions({1, 2}).chunks(4).checkpoint(checkpoint));
  pipe.forward_backward({x}, y);
  expect_close(bn_layer->norm->running_mean, plain->running_mean, 1e-5, 1e-6, "running_mean");
  expect_close(bn_layer->norm->running_var, plain->running_var, 1e-5, 1e-6, "running_var");
  EXPECT_EQ(bn_layer->norm->num_batches_tracked.item<int64_t>(), 1);
}

TEST(DeferredBatchNorm, RunningStatsEqualAPlainFullBatchStep) {
  check_running_stats_equal_plain(Checkpoint::kNever);
}

TEST(DeferredBatchNorm, RecomputeDoesNotChangeRunningStats) {
  // Every micro-batch is recomputed; counting recomputes would double the sample count and
  // change the unbiased variance.
  check_running_stats_equal_plain(Checkpoint::kAlways);
}

TEST(DeferredBatchNorm, NormalisesEachMicroBatchByItsOwnStatistics) {
  DeferredBatchNorm bn(3);
  const auto x = torch::randn({8, 3}) * 3 + 1;
  LayerContext context;
  LayerContextGuard guard(&context);
  const auto out = bn(x.narrow(0, 0, 4));
  const auto mean = out.mean(0);
  EXPECT_TRUE(torch::allclose(mean, torch::zeros({3}), 1e-5, 1e-5)) << mean;
  // Inside a pipeline nothing is committed before the step ends.
  EXPECT_TRUE(torch::equal(bn->running_mean, torch::zeros({3})));
  bn->on_step_end();
  EXPECT_FALSE(torch::equal(bn->running_mean, torch::zeros({3})));
}

TEST(DeferredBatchNorm, PlainCallBehavesLikeLibTorchBatchNorm1d) {
  DeferredBatchNorm ours(DeferredBatchNormOptions(5).momentum(0.3));
  torch::nn::BatchNorm1d theirs(torch::nn::BatchNormOptions(5).momentum(0.3));
  for (int i = 0; i < 3; ++i) {
    const auto x = torch::randn({10, 5}) + i;
    expect_close(ours(x), theirs(x), 1e-5, 1e-5, "output");
  }
  expect_close(ours->running_mean, theirs->running_mean, 1e-5, 1e-6, "running_mean");
  expect_close(ours->running_var, theirs->running_var, 1e-5, 1e-6, "running_var");
  ours->eval();
  theirs->eval();
  const auto x = torch::randn({4, 5});
  expect_close(ours(x), theirs(x), 1e-5, 1e-5, "eval output");
}

TEST(DeferredBatchNorm, CumulativeMomentumAveragesSteps) {
  DeferredBatchNorm ours(DeferredBatchNormOptions(2).momentum(c10::nullopt));
  torch::nn::BatchNorm1d theirs(torch::nn::BatchNormOptions(2).momentum(c10::nullopt));
  for (int i = 0; i < 3; ++i) {
    const auto x = torch::randn({6, 2}) * (i + 1);
    ours(x);
    theirs(x);
  }
  expect_close(ours->running_var, theirs->running_var, 1e-5, 1e-6, "running_var");
}

TEST(DeferredBatchNorm, AbortForgetsTheStep) {
  DeferredBatchNorm bn(2);
  LayerContext context;
  LayerContextGuard guard(&context);
  bn(torch::randn({4, 2}) + 5);
  bn->on_step_abort();
  bn->on_step_end();
  EXPECT_TRUE(torch::equal(bn->running_mean, torch::zeros({2})));
}

TEST(DeferredBatchNorm, WrongChannelCountIsAClearError) {
  DeferredBatchNorm bn(4);
  try {
    bn(torch::randn({2, 3}));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("BatchNorm(4)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpipe::testing
