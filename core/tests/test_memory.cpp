// The memory meter charges allocations to the device of the thread that made them, and
// re-materialisation cuts a stage's peak activation memory.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::testing {
namespace {

TEST(MemoryMeter, ChargesTheAllocatingThreadsDevice) {
  memory::install();
  const DeviceSpec dev{torch::kCPU, 7};
  DeviceWorker worker(dev, 1);
  const int64_t before = memory::stats(dev).current_bytes;
  torch::Tensor t;
  worker.run([&] { t = torch::empty({1 << 20}, torch::kFloat); });
  EXPECT_EQ(memory::stats(dev).current_bytes - before, 4 << 20);
  // Freed on this (host) thread, released from the device that was charged.
  t = torch::Tensor();
  EXPECT_EQ(memory::stats(dev).current_bytes, before);
}

TEST(MemoryMeter, PeakAndReset) {
  memory::install();
  const DeviceSpec dev{torch::kCPU, 8};
  DeviceWorker worker(dev, 1);
  memory::reset_peak(dev);
  const int64_t base = memory::stats(dev).current_bytes;
  worker.run([] { auto big = torch::empty({1 << 21}, torch::kFloat); });
  EXPECT_GE(memory::stats(dev).peak_bytes - base, 8 << 20);
  memory::reset_peak(dev);
  EXPECT_EQ(memory::stats(dev).peak_bytes, memory::stats(dev).current_bytes);
}

TEST(MemoryMeter, ChargeMovesAccountingWithoutCopying) {
  memory::install();
  const DeviceSpec dev{torch::kCPU, 9};
  const int64_t before = memory::stats(dev).current_bytes;
  auto t = torch::empty({1000}, torch::kDouble);
  ASSERT_TRUE(memory::charge(t, dev));
  EXPECT_EQ(memory::stats(dev).current_bytes - before, 8000);
  t = torch::Tensor();
  EXPECT_EQ(memory::stats(dev).current_bytes, before);
}

TEST(MemoryMeter, PipelineParametersLiveOnTheirStagesDevice) {
  auto layers = seeded_mlp(models::MlpOptions(64, 256, 3, 8));  // 4 layers
  Pipeline pipe(layers, PipelineOptions({2, 2}).devices({"cpu:20", "cpu:21"}));
  int64_t stage0 = 0, stage1 = 0;
  for (auto& p : pipe.stage(0).parameters())
    stage0 += p.numel() * 4;
  for (auto& p : pipe.stage(1).parameters())
    stage1 += p.numel() * 4;
  EXPECT_GE(memory::stats({torch::kCPU, 20}).current_bytes, stage0);
  EXPECT_GE(memory::stats({torch::kCPU, 21}).current_bytes, stage1);
  EXPECT_LT(memory::stats({torch::kCPU, 21}).current_bytes, stage1 + (64 << 10));
}

int64_t first_stage_activation_peak(Checkpoint checkpoint, ScheduleKind schedule, int64_t M) {
  auto layers = seeded_mlp(models::MlpOptions(256, 256, 15, 10));  // 16 layers
  Pipeline pipe(layers, PipelineOptions({8, 8})
                            .chunks(M)
                            .checkpoint(checkpoint)
                            .schedule(schedule)
                            .threads_per_device(1));
  const auto x = torch::randn({256, 256});
  const auto y = torch::randint(0, 10, {256});
  pipe.forward_backward({x}, y);  // first step allocates the gradients
  pipe.forward_backward({x}, y);
  return pipe.last_step().peak_activation_bytes.at(0);
}

TEST(Recompute, AlwaysHalvesTheFirstStagesActivationPeakAtM8) {
  const int64_t never = first_stage_activation_peak(Checkpoint::kNever, ScheduleKind::kGPipe, 8);
  const int64_t always = first_stage_activation_peak(Checkpoint::kAlways, ScheduleKind::kGPipe, 8);
  RecordProperty("never_bytes", std::to_string(never));
  RecordProperty("always_bytes", std::to_string(always));
  EXPECT_GT(never, 0);
  EXPECT_LT(always, never / 2) << "always=" << always << " never=" << never;
}

TEST(OneFOneB, HoldsUnderHalfTheFirstStagesActivationsOfGPipeAtM32) {
  // 1F1B keeps at most K = 2 micro-batches in flight on stage 0, GPipe all 32.
  const int64_t gpipe = first_stage_activation_peak(Checkpoint::kNever, ScheduleKind::kGPipe, 32);
  const int64_t one_f_one_b =
      first_stage_activation_peak(Checkpoint::kNever, ScheduleKind::k1F1B, 32);
  RecordProperty("gpipe_bytes", std::to_string(gpipe));
  RecordProperty("1f1b_bytes", std::to_string(one_f_one_b));
  EXPECT_GT(one_f_one_b, 0);
  EXPECT_LT(one_f_one_b, gpipe / 2) << "1f1b=" << one_f_one_b << " gpipe=" << gpipe;
}

}  // namespace
}  // namespace gpipe::testing
