// GradientReducer without c10d: the sum is a function the test controls. Buckets follow the
// order gradients become final; an armed backward hands every bucket over before the stage is
// declared done (so the sums overlap the backward); finish() waits for every bucket, copies the
// sums back and rethrows the communication thread's failure. The reducer on real replicas is
// checked against the in-process pipeline in test_process_group.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gpipe/grad_reducer.h"
#include "test_util.h"

namespace gpipe::testing {
namespace {

// One stage holding the whole MLP (hidden Linear+ReLU layers and the classifier).
struct OneStage {
  explicit OneStage(int64_t depth = 3)
      : stage(0, 1, seeded_mlp(models::MlpOptions(6, 8, depth, 4)), 0, DeviceSpec::parse("cpu:0")) {
  }

  // F and B of one micro-batch: every parameter's gradient accumulates once.
  void forward_backward(int64_t step) {
    torch::manual_seed(step);
    stage.begin_step(step, 1, 0);
    stage.forward(0, {torch::randn({5, 6})}, false, torch::randint(0, 4, {5}), 1.0, &loss);
    stage.backward(0, {});
  }

  LossFn loss = cross_entropy_loss();
  Stage stage;
};

// Counts the buckets the communication thread sums and doubles them, as two identical replicas
// would.
struct RecordingSum {
  std::atomic<int> calls{0};
  GradientReducer::SumFn fn() {
    return [this](torch::Tensor& flat) {
      flat.mul_(2);
      ++calls;
    };
  }
};

struct PeerLost : std::runtime_error {
  PeerLost() : std::runtime_error("peer lost") {}
};

bool wait_for(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(GradientReducer, BucketsFollowTheOrderGradientsBecomeFinal) {
  OneStage one;
  RecordingSum sum;
  const auto params = one.stage.parameters();  // w0 b0 w1 b1 ... in forward order
  // One byte a bucket: every parameter alone, the last layer's first.
  GradientReducer tiny({&one.stage}, 1, sum.fn());
  ASSERT_EQ(tiny.num_buckets(), static_cast<int64_t>(params.size()));
  const auto layout = tiny.bucket_layout();
  for (size_t b = 0; b < layout.size(); ++b)
    EXPECT_EQ(layout[b], std::vector<int64_t>{static_cast<int64_t>(b)});
  // 25 MiB: everything in one bucket.
  GradientReducer large({&one.stage}, 25 << 20, sum.fn());
  EXPECT_EQ(large.num_buckets(), 1);
  EXPECT_CONFIG_ERROR(GradientReducer({&one.stage}, 0, sum.fn()), "bucket_mb takes MiB");
}

TEST(GradientReducer, AnArmedBackwardHandsEveryBucketOverBeforeTheStageIsDone) {
  OneStage one;
  RecordingSum sum;
  GradientReducer reducer({&one.stage}, 1, sum.fn());
  // Not armed: gradients of an earlier micro-batch are not final, nothing is summed.
  reducer.begin_step();
  one.forward_backward(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(sum.calls.load(), 0);
  reducer.cancel();
  // Armed: the accumulator hooks report each parameter (gpipe::Linear's included), and the
  // thread sums every bucket with neither stage_done nor finish called.
  for (const auto& p : one.stage.parameters())
    p.mutable_grad().zero_();
  reducer.begin_step();
  reducer.arm(0);
  one.forward_backward(1);
  EXPECT_TRUE(wait_for([&] { return sum.calls.load() == reducer.num_buckets(); }))
      << sum.calls.load() << " of " << reducer.num_buckets() << " buckets summed";
  std::vector<torch::Tensor> before;
  for (const auto& p : one.stage.parameters())
    before.push_back(p.grad().clone());
  const auto stats = reducer.finish();
  EXPECT_EQ(stats.buckets, reducer.num_buckets());
  EXPECT_GE(stats.reduce_ms, 0.0);
  // The sums were copied back already: finish changed nothing more.
  const auto params = one.stage.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::equal(params[i].grad(), before[i])) << "parameter " << i;
}

TEST(GradientReducer, FinishSumsWhatNoHookReportedAndCopiesTheSumsBack) {
  OneStage one;
  RecordingSum sum;
  GradientReducer reducer({&one.stage}, 64, sum.fn());
  reducer.begin_step();
  one.forward_backward(0);  // not armed: finish must still sum every bucket
  std::vector<torch::Tensor> local;
  for (const auto& p : one.stage.parameters())
    local.push_back(p.grad().clone());
  reducer.finish();
  EXPECT_EQ(sum.calls.load(), reducer.num_buckets());
  const auto params = one.stage.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    expect_close(params[i].grad(), local[i] * 2, 0, 0, "parameter " + std::to_string(i));
}

TEST(GradientReducer, FinishRethrowsTheCommunicationThreadsFailureAndTheNextStepRuns) {
  OneStage one;
  std::atomic<bool> fail{true};
  GradientReducer reducer({&one.stage}, 1, [&](torch::Tensor& flat) {
    if (fail) throw PeerLost();
    flat.mul_(2);
  });
  reducer.begin_step();
  one.forward_backward(0);
  EXPECT_THROW(reducer.finish(), PeerLost);
  fail = false;
  reducer.begin_step();
  one.forward_backward(1);
  EXPECT_EQ(reducer.finish().buckets, reducer.num_buckets());
}

}  // namespace
}  // namespace gpipe::testing
