// The pipeline against the plain model: transparency (same loss and gradients at any K, M and
// checkpoint mode), K-invariance with dropout, and recovery from a failing stage.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "test_util.h"

namespace gpipe::testing {
namespace {

struct Shape {
  int64_t K;
  int64_t M;
  Checkpoint checkpoint;
  ScheduleKind schedule;
};

class Transparency
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, Checkpoint, ScheduleKind>> {};

TEST_P(Transparency, LossAndGradientsEqualThePlainModel) {
  const auto [K, M, checkpoint, schedule] = GetParam();
  const auto options = models::MlpOptions(12, 24, 5, 7);
  torch::manual_seed(3);
  const auto input = torch::randn({12, 12});
  const auto target = torch::randint(0, 7, {12});

  auto plain = seeded_mlp(options);
  const auto ref = plain_step(plain, input, target);

  auto layers = seeded_mlp(options);
  Pipeline pipe(layers, PipelineOptions(even_balance(6, K))
                            .chunks(M)
                            .checkpoint(checkpoint)
                            .schedule(schedule)
                            .threads_per_device(1));
  const double loss = pipe.forward_backward({input}, target);
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::abs(ref.loss) + 1e-6);
  const auto named = pipe.named_parameters();
  ASSERT_EQ(named.size(), ref.grads.size());
  for (const auto& [name, param] : named) {
    expect_close(param.grad(), ref.grads.at(name), 1e-5, 1e-6, name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    KxMxCheckpoint, Transparency,
    ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 2, 4, 5),
                       ::testing::Values(Checkpoint::kAlways, Checkpoint::kExceptLast,
                                         Checkpoint::kNever),
                       ::testing::Values(ScheduleKind::kGPipe, ScheduleKind::k1F1B)),
    [](const auto& info) {
      return "K" + std::to_string(std::get<0>(info.param)) + "_M" +
             std::to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param)) +
             "_" + (std::get<3>(info.param) == ScheduleKind::kGPipe ? "gpipe" : "onefoneb");
    });

// Five SGD steps with dropout; K changes nothing.
std::vector<double> dropout_losses(int64_t K, ScheduleKind schedule, Checkpoint checkpoint) {
  const auto options = models::MlpOptions(10, 32, 7, 5).dropout(0.3);
  auto layers = seeded_mlp(options);
  Pipeline pipe(layers, PipelineOptions(even_balance(8, K))
                            .chunks(4)
                            .seed(11)
                            .schedule(schedule)
                            .checkpoint(checkpoint)
                            .threads_per_device(1));
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  });
  torch::manual_seed(5);
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    const auto x = torch::randn({16, 10});
    const auto y = torch::randint(0, 5, {16});
    losses.push_back(pipe.train_step(x, y));
  }
  return losses;
}

TEST(KInvariance, DropoutLossesDoNotDependOnK) {
  const auto k1 = dropout_losses(1, ScheduleKind::kGPipe, Checkpoint::kExceptLast);
  for (int64_t K : {2, 4}) {
    for (auto schedule : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
      const auto other = dropout_losses(K, schedule, Checkpoint::kExceptLast);
      for (size_t i = 0; i < k1.size(); ++i) {
        EXPECT_NEAR(other[i], k1[i], 1e-6)
            << "K=" << K << " " << to_string(schedule) << " step " << i;
      }
    }
  }
}

TEST(KInvariance, RecomputeReplaysTheSameDropoutMasks) {
  const auto never = dropout_losses(2, ScheduleKind::kGPipe, Checkpoint::kNever);
  const auto always = dropout_losses(2, ScheduleKind::kGPipe, Checkpoint::kAlways);
  for (size_t i = 0; i < never.size(); ++i)
    EXPECT_NEAR(always[i], never[i], 1e-6) << "step " << i;
}

TEST(KInvariance, DropoutActuallyChangesTheLoss) {
  // Guard against a dropout that silently does nothing: the same run without dropout differs.
  const auto with = dropout_losses(2, ScheduleKind::kGPipe, Checkpoint::kNever);
  const auto options = models::MlpOptions(10, 32, 7, 5);
  auto layers = seeded_mlp(options);
  Pipeline pipe(layers, PipelineOptions({4, 4}).chunks(4).seed(11).threads_per_device(1));
  torch::manual_seed(5);
  const auto x = torch::randn({16, 10});
  const auto y = torch::randint(0, 5, {16});
  EXPECT_GT(std::abs(pipe.forward_backward({x}, y) - with[0]), 1e-4);
}

TEST(Stage, BackwardWithoutItsRecomputeIsAnInternalError) {
  // lower() places the R of every checkpointed F; a B that finds none must not replay silently.
  Stage stage(0, 1, seeded_mlp(models::MlpOptions(6, 8, 2, 4)), 0, DeviceSpec::parse("cpu:0"));
  const LossFn loss = cross_entropy_loss();
  stage.begin_step(0, 1, 0);
  stage.forward(0, {torch::randn({5, 6})}, /*checkpoint=*/true, torch::randint(0, 4, {5}), 1.0,
                &loss);
  expect_error<InternalError>([&] { stage.backward(0, {}); },
                              {"ran B0 of a checkpointed F0 without its R", "lacks R0"});
  // With its R the same B runs.
  stage.recompute(0);
  EXPECT_NO_THROW(stage.backward(0, {}));
}

TEST(Pipeline, ForwardMatchesPlainEvaluation) {
  const auto options = models::MlpOptions(6, 16, 3, 4).dropout(0.5).batch_norm(true);
  auto plain = seeded_mlp(options);
  auto layers = seeded_mlp(options);
  Pipeline pipe(layers, PipelineOptions({2, 2}).chunks(3).threads_per_device(1));
  const auto x = torch::randn({7, 6});
  Activations h{x};
  for (auto& layer : plain) {
    layer->eval();
    h = layer->forward(h);
  }
  expect_close(pipe.forward(x), h[0], 1e-6, 1e-6, "eval output");
  EXPECT_TRUE(layers[0]->is_training()) << "forward() must restore training mode";
}

TEST(Pipeline, TrainStepsEqualPlainSgdWithMomentum) {
  const auto options = models::MlpOptions(8, 16, 3, 3);
  auto plain = seeded_mlp(options);
  auto layers = seeded_mlp(options);
  Pipeline pipe(layers, PipelineOptions({1, 2, 1}).chunks(3).threads_per_device(1));
  const auto sgd = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3);
  pipe.set_optimizer([&](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, sgd);
  });
  std::vector<torch::Tensor> plain_params;
  for (auto& layer : plain) {
    for (auto& p : layer->parameters())
      plain_params.push_back(p);
  }
  torch::optim::SGD plain_sgd(plain_params, sgd);
  torch::manual_seed(1);
  for (int step = 0; step < 4; ++step) {
    const auto x = torch::randn({9, 8});
    const auto y = torch::randint(0, 3, {9});
    plain_sgd.zero_grad();
    const double expected = plain_step(plain, x, y).loss;
    plain_sgd.step();
    EXPECT_NEAR(pipe.train_step(x, y), expected, 1e-5) << "step " << step;
  }
  const auto params = pipe.parameters();
  ASSERT_EQ(params.size(), plain_params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    expect_close(params[i], plain_params[i], 1e-5, 1e-6, "parameter " + std::to_string(i));
  }
  EXPECT_EQ(pipe.step(), 4);
}

TEST(Pipeline, TrainingLearnsALearnableTask) {
  auto layers = seeded_mlp(models::MlpOptions(8, 32, 2, 3));
  Pipeline pipe(layers, PipelineOptions({2, 1}).chunks(4).threads_per_device(1));
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-2));
  });
  torch::manual_seed(1);
  const auto x = torch::randn({64, 8});
  const auto y = x.narrow(1, 0, 3).argmax(1);  // class = largest of the first three features
  const double first = pipe.train_step(x, y);
  double last = first;
  for (int i = 0; i < 60; ++i)
    last = pipe.train_step(x, y);
  EXPECT_LT(last, 0.3 * first) << "first " << first << " last " << last;
}

// A layer that fails, on purpose, at one micro-batch.
class FailingLayer : public Layer {
 public:
  explicit FailingLayer(int64_t fail_at) : Layer("failing"), fail_at_(fail_at) {}
  Activations forward(const Activations& x) override {
    auto* context = current_layer_context();
    if (armed && context != nullptr && context->microbatch == fail_at_) {
      throw std::runtime_error("boom at micro-batch " + std::to_string(fail_at_));
    }
    return x;
  }
  bool armed = true;

 private:
  int64_t fail_at_;
};

TEST(Pipeline, AFailingStageEndsTheStepWithItsIndexAndTheNextStepWorks) {
  auto layers = seeded_mlp(models::MlpOptions(4, 8, 3, 2));
  auto failing = std::make_shared<FailingLayer>(2);
  layers.insert(layers.begin() + 3, failing);  // 5 layers: stage 1 holds the failing one
  Pipeline pipe(layers, PipelineOptions({2, 2, 1}).chunks(4).threads_per_device(1));
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
  });
  const auto x = torch::randn({8, 4});
  const auto y = torch::randint(0, 2, {8});
  std::vector<torch::Tensor> before;
  for (auto& p : pipe.parameters())
    before.push_back(p.detach().clone());
  try {
    pipe.train_step(x, y);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.device(), 1);
    EXPECT_NE(std::string(e.what()).find("device 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("boom at micro-batch 2"), std::string::npos) << e.what();
  }
  const auto after = pipe.parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(after[i], before[i])) << "no partial optimizer step";
    EXPECT_TRUE(!after[i].grad().defined() || after[i].grad().eq(0).all().item<bool>())
        << "gradients of the failed step are cleared";
  }
  EXPECT_EQ(pipe.step(), 0);
  failing->armed = false;
  EXPECT_TRUE(std::isfinite(pipe.train_step(x, y)));
  EXPECT_EQ(pipe.step(), 1);
}

TEST(Pipeline, GradientClippingBoundsTheGlobalNorm) {
  auto layers = seeded_mlp(models::MlpOptions(4, 8, 3, 2));
  Pipeline pipe(layers, PipelineOptions({2, 2}).chunks(2).threads_per_device(1));
  const auto x = torch::randn({8, 4}) * 100;
  const auto y = torch::randint(0, 2, {8});
  pipe.forward_backward({x}, y);
  const double norm = pipe.grad_norm();
  ASSERT_GT(norm, 0.5);
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.0));
  });
  pipe.set_grad_clip(0.5);
  pipe.train_step(x, y);
  EXPECT_NEAR(pipe.grad_norm(), 0.5, 1e-4);
}

TEST(Pipeline, TimelineRecordsEveryActionOfTheStep) {
  auto layers = seeded_mlp(models::MlpOptions(4, 8, 3, 2));
  Pipeline pipe(layers, PipelineOptions({2, 2}).chunks(3).checkpoint(Checkpoint::kExceptLast));
  pipe.forward_backward({torch::randn({6, 4})}, torch::randint(0, 2, {6}));
  const auto events = pipe.timeline().events();
  // 2 stages x (3 F + 3 B) + 2 stages x 2 recomputes (every micro-batch but the last), and
  // 3 activations and 3 gradients each sent once and received once.
  int recomputes = 0, messages = 0;
  for (const auto& e : events) {
    recomputes += e.name[0] == 'R' && std::isdigit(static_cast<unsigned char>(e.name[1]));
    messages += e.communication;
  }
  EXPECT_EQ(recomputes, 4);
  EXPECT_EQ(messages, 12);
  EXPECT_EQ(events.size(), 16u + 12u);
  EXPECT_GE(pipe.last_step().bubble_fraction, 0.0);
  EXPECT_LT(pipe.last_step().bubble_fraction, 1.0);
}

}  // namespace
}  // namespace gpipe::testing
