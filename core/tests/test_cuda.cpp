// The CUDA path, run by scripts/gpu_check.sh on a machine with a GPU and skipped elsewhere: two
// stages on one GPU against the plain model on the CPU (with deferred BatchNorm, under every
// checkpoint mode and two schedules), dropout replayed exactly by re-materialisation on CUDA's
// generator, and the memory meter reading the CUDA caching allocator's statistics.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "test_util.h"

namespace gpipe::testing {
namespace {

#define SKIP_WITHOUT_CUDA()         \
  if (!torch::cuda::is_available()) \
  GTEST_SKIP() << "no CUDA device (scripts/gpu_check.sh runs this)"

const auto kMlp = models::MlpOptions(12, 32, 5, 5).batch_norm(true);  // 6 layers
constexpr double kLr = 0.1;

std::unique_ptr<Pipeline> two_stages_on_one_gpu(const LayerList& layers, int64_t M,
                                                Checkpoint checkpoint, ScheduleKind schedule,
                                                bool measure_memory = false) {
  auto pipe = std::make_unique<Pipeline>(layers, PipelineOptions({3, 3})
                                                     .devices({"cuda:0", "cuda:0"})
                                                     .chunks(M)
                                                     .checkpoint(checkpoint)
                                                     .schedule(schedule)
                                                     .seed(17)
                                                     .measure_memory(measure_memory));
  pipe->set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(kLr));
  });
  return pipe;
}

using Params = std::tuple<Checkpoint, ScheduleKind>;
class CudaTransparency : public ::testing::TestWithParam<Params> {};

TEST_P(CudaTransparency, TwoStagesOnOneGpuEqualThePlainModelOnTheCpu) {
  SKIP_WITHOUT_CUDA();
  const auto checkpoint = std::get<0>(GetParam());
  const auto schedule = std::get<1>(GetParam());
  constexpr int64_t kM = 4;
  torch::manual_seed(3);
  const auto input = torch::randn({16, 12});
  const auto target = torch::randint(0, 5, {16});
  auto plain = seeded_mlp(kMlp);
  const double plain_loss = plain_microbatched_step(plain, input, target, kM, 17, 0);
  auto pipe = two_stages_on_one_gpu(seeded_mlp(kMlp), kM, checkpoint, schedule);
  const double loss = pipe->train_step(input, target);
  EXPECT_NEAR(loss, plain_loss, 1e-4 * std::abs(plain_loss) + 1e-5);
  const auto reference = named_tensors(plain);
  for (const auto& [name, p] : pipe->named_parameters()) {
    ASSERT_TRUE(p.is_cuda()) << name << " is not on the GPU";
    const auto& q = reference.at(name);
    expect_close(p.grad().cpu(), q.grad(), 1e-3, 1e-5, name + " gradient");
    torch::NoGradGuard no_grad;
    expect_close(p.cpu(), q - kLr * q.grad(), 1e-4, 1e-5, name + " after the step");
  }
  for (const auto& [name, b] : pipe->named_buffers()) {
    if (b.is_floating_point()) expect_close(b.cpu(), reference.at(name), 1e-4, 1e-5, name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaTransparency,
    ::testing::Combine(::testing::Values(Checkpoint::kAlways, Checkpoint::kExceptLast,
                                         Checkpoint::kNever),
                       ::testing::Values(ScheduleKind::kGPipe, ScheduleKind::k1F1B)),
    [](const auto& info) {
      std::string name =
          to_string(std::get<1>(info.param)) + "_" + to_string(std::get<0>(info.param));
      for (auto& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// Re-materialisation replays each micro-batch's dropout mask from its key on CUDA's generator,
// so recomputing changes nothing.
TEST(Cuda, DropoutIsReplayedExactlyUnderRecompute) {
  SKIP_WITHOUT_CUDA();
  const auto options = models::MlpOptions(12, 32, 5, 5).dropout(0.3);
  torch::manual_seed(3);
  const auto input = torch::randn({16, 12});
  const auto target = torch::randint(0, 5, {16});
  auto always =
      two_stages_on_one_gpu(seeded_mlp(options), 4, Checkpoint::kAlways, ScheduleKind::kGPipe);
  auto never =
      two_stages_on_one_gpu(seeded_mlp(options), 4, Checkpoint::kNever, ScheduleKind::kGPipe);
  EXPECT_DOUBLE_EQ(always->train_step(input, target), never->train_step(input, target));
  const auto a = always->named_parameters();
  const auto b = never->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    expect_close(a[i].second.cpu(), b[i].second.cpu(), 1e-6, 1e-7, a[i].first);
}

// Before anything is allocated on a GPU, the meter answers zero: CUDA's caching allocator does
// not know its devices until CUDA is initialised, and LibTorch 2.11 threw "Invalid device
// argument" from the first memory::stats(cuda:0) of a program (the meter now initialises CUDA
// first). The check runs in a re-executed test process (GoogleTest's threadsafe death-test
// style), so no other test has touched the GPU before it; on a GPU, the old meter ends that
// process with the uncaught c10::Error and the test fails naming the message.
TEST(Cuda, MemoryMeterAnswersBeforeTheFirstAllocation) {
  SKIP_WITHOUT_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const auto gpu = DeviceSpec::parse("cuda:0");
        const auto before = memory::stats(gpu);
        memory::PeakWindow window(gpu);
        const bool zero = before.current_bytes == 0 && before.peak_bytes == 0 &&
                          window.start_bytes() == 0 && window.peak_bytes() == 0;
        std::fprintf(stderr, "cuda:0 before any allocation: current %lld, peak %lld\n",
                     static_cast<long long>(before.current_bytes),
                     static_cast<long long>(before.peak_bytes));
        std::exit(zero ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "before any allocation: current 0, peak 0");
}

// The meter reads the caching allocator: a 64 MiB tensor shows in the current bytes, and a
// window's peak covers a temporary allocated and freed inside it.
TEST(Cuda, MemoryMeterReadsTheCachingAllocator) {
  SKIP_WITHOUT_CUDA();
  const auto gpu = DeviceSpec::parse("cuda:0");
  constexpr int64_t kBytes = int64_t{64} << 20;
  const auto before = memory::stats(gpu).current_bytes;
  auto held = torch::empty({kBytes / 4}, torch::device(torch::kCUDA).dtype(torch::kFloat));
  EXPECT_GE(memory::stats(gpu).current_bytes - before, kBytes);
  memory::PeakWindow window(gpu);
  { auto temporary = torch::ones({kBytes / 4}, torch::device(torch::kCUDA)); }
  EXPECT_GE(window.peak_bytes() - window.start_bytes(), kBytes);
  // A pipeline step with measure_memory reports a peak per local device.
  auto pipe = two_stages_on_one_gpu(seeded_mlp(kMlp), 4, Checkpoint::kExceptLast,
                                    ScheduleKind::kGPipe, /*measure_memory=*/true);
  pipe->train_step(torch::randn({16, 12}), torch::randint(0, 5, {16}));
  ASSERT_EQ(pipe->last_step().peak_bytes.size(), 2u);
  for (const auto peak : pipe->last_step().peak_bytes)
    EXPECT_GT(peak, 0);
}

}  // namespace
}  // namespace gpipe::testing
