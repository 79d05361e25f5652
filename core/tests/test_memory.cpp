// The memory meter charges allocations to the device of the thread that made them, is opt-in,
// keeps one peak per window, and shows re-materialisation cutting a stage's activation peak.
#include <c10/core/CPUAllocator.h>
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

TEST(MemoryMeter, WindowsKeepTheirOwnPeaks) {
  memory::install();
  const DeviceSpec dev{torch::kCPU, 8};
  DeviceWorker worker(dev, 1);
  const memory::PeakWindow first(dev);
  EXPECT_EQ(first.peak_bytes(), first.start_bytes());
  worker.run([] { auto big = torch::empty({1 << 21}, torch::kFloat); });  // 8 MiB, freed
  // A window opened later starts from what the device holds now and leaves the first alone.
  const memory::PeakWindow second(dev);
  EXPECT_EQ(second.peak_bytes(), second.start_bytes());
  EXPECT_GE(first.peak_bytes() - first.start_bytes(), 8 << 20);
  worker.run([] { auto small = torch::empty({1 << 19}, torch::kFloat); });  // 2 MiB, freed
  EXPECT_GE(second.peak_bytes() - second.start_bytes(), 2 << 20);
  EXPECT_LT(second.peak_bytes() - second.start_bytes(), 8 << 20);
  EXPECT_GE(memory::stats(dev).peak_bytes - first.start_bytes(), 8 << 20);
}

TEST(MemoryMeter, AWindowIndexIsReusedOnceClosed) {
  memory::install();
  const DeviceSpec dev{torch::kCPU, 10};
  for (int i = 0; i < 200; ++i) {  // more than the 64 that may be open at once
    memory::PeakWindow window(dev);
    EXPECT_EQ(window.peak_bytes(), window.start_bytes());
  }
  std::vector<memory::PeakWindow> open;
  for (int i = 0; i < 64; ++i)
    open.emplace_back(dev);
  EXPECT_THROW(memory::PeakWindow extra(dev), Error);
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
  Pipeline pipe(layers, PipelineOptions({2, 2}).devices({"cpu:20", "cpu:21"}).measure_memory(true));
  int64_t stage0 = 0, stage1 = 0;
  for (auto& p : pipe.stage(0).parameters())
    stage0 += p.numel() * 4;
  for (auto& p : pipe.stage(1).parameters())
    stage1 += p.numel() * 4;
  EXPECT_GE(memory::stats({torch::kCPU, 20}).current_bytes, stage0);
  EXPECT_GE(memory::stats({torch::kCPU, 21}).current_bytes, stage1);
  EXPECT_LT(memory::stats({torch::kCPU, 21}).current_bytes, stage1 + (64 << 10));
}

TEST(MemoryMeter, IsOptInAndLeavesTheAllocatorAloneWithout) {
  c10::Allocator* before = c10::GetCPUAllocator();
  Pipeline pipe(seeded_mlp(models::MlpOptions(8, 16, 1, 4)), PipelineOptions({1, 1}));
  pipe.forward_backward({torch::randn({4, 8})}, torch::randint(0, 4, {4}));
  EXPECT_EQ(c10::GetCPUAllocator(), before);
  EXPECT_TRUE(pipe.last_step().peak_bytes.empty());
  EXPECT_THROW(pipe.peak_bytes_since_step_began(0), ConfigError);
}

TEST(MemoryMeter, PipelinesOnOneDeviceDoNotResetEachOthersPeaks) {
  // Pipeline `a`'s first layer allocates 16 MiB, frees it, and then runs a whole step of
  // pipeline `b` on the same virtual device before `a`'s step ends.
  const auto options = PipelineOptions({2}).devices({"cpu:40"}).measure_memory(true);
  Pipeline b(LayerList{make_layer("fc", torch::nn::Linear(8, 4))},
             PipelineOptions({1}).devices({"cpu:40"}).measure_memory(true));
  bool b_ran = false;
  auto allocate_then_step_b = make_function_layer("alloc", [&](const Activations& in) {
    { auto scratch = torch::empty({4 << 20}, torch::kFloat); }
    if (!b_ran) {
      b.forward_backward({torch::randn({4, 8})}, torch::randint(0, 4, {4}));
      b_ran = true;
    }
    return in;
  });
  Pipeline a(LayerList{allocate_then_step_b, make_layer("fc", torch::nn::Linear(8, 4))}, options);
  a.forward_backward({torch::randn({4, 8})}, torch::randint(0, 4, {4}));
  ASSERT_TRUE(b_ran);
  EXPECT_GE(a.last_step().peak_activation_bytes.at(0), 16 << 20);
  EXPECT_LT(b.last_step().peak_activation_bytes.at(0), 16 << 20);
}

int64_t first_stage_activation_peak(Checkpoint checkpoint, ScheduleKind schedule, int64_t M) {
  auto layers = seeded_mlp(models::MlpOptions(256, 256, 15, 10));  // 16 layers
  Pipeline pipe(layers, PipelineOptions({8, 8})
                            .chunks(M)
                            .checkpoint(checkpoint)
                            .schedule(schedule)
                            .threads_per_device(1)
                            .measure_memory(true));
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
