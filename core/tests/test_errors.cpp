// Every bad input gets a typed exception whose message names the offending value.
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "gpipe/run_parallel.h"
#include "test_util.h"

namespace gpipe::testing {
namespace {

LayerList small() {
  return seeded_mlp(models::MlpOptions(4, 8, 3, 2));
}  // 4 layers

// Messages quote what the user gave, a garbage file's bytes included: they reach the terminal
// as one printable line.
TEST(ErrorMessage, IsOnePrintableLine) {
  EXPECT_EQ(printable("a\nb\tc\r"), "a b c ");
  EXPECT_EQ(printable(std::string("x\x01\x7f\0y", 5)), "x\\x01\\x7f\\x00y");
  // Valid UTF-8 stays; a lone lead byte, a stray continuation, an overlong form and a C1
  // control do not.
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(printable("\xe2\x82\xac \xf0\x9f\x98\x80"), "\xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(printable("\xc3"), "\\xc3");
  EXPECT_EQ(printable("\x80"), "\\x80");
  EXPECT_EQ(printable("\xc0\x80"), "\\xc0\\x80");
  EXPECT_EQ(printable("\xc2\x85"), "\\xc2\\x85");
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(error_message(ConfigError("bad\nvalue \x1b[31m")), "bad value \\x1b[31m");
}

TEST(BadConfig, BalanceThatDoesNotSumToTheLayerCount) {
  expect_error<ConfigError>(
      [] {
        Pipeline(small(), PipelineOptions({2, 3}));
      },
      {"2,3", "sums to 5", "4 layers"});
}

TEST(BadConfig, BalanceWithAnEmptyStage) {
  expect_error<ConfigError>(
      [] {
        Pipeline(small(), PipelineOptions({2, 0, 2}));
      },
      {"2,0,2", "stage 1", "at least one"});
}

TEST(BadConfig, EmptyBalance) {
  expect_error<ConfigError>([] { Pipeline(small(), PipelineOptions(std::vector<int64_t>{})); },
                            {"balance is empty"});
}

TEST(BadConfig, DeviceCountDiffersFromK) {
  expect_error<ConfigError>(
      [] {
        Pipeline(small(), PipelineOptions({2, 2}).devices({"cpu:0", "cpu:1", "cpu:2"}));
      },
      {"K=2", "3 devices", "cpu:0,cpu:1,cpu:2"});
}

TEST(BadConfig, RepeatedCpuDevice) {
  expect_error<ConfigError>(
      [] {
        Pipeline(small(), PipelineOptions({1, 2, 1}).devices({"cpu:0", "cpu:1", "cpu:0"}));
      },
      {"cpu:0", "positions 0 and 2", "distinct"});
}

TEST(BadConfig, UnknownDevice) {
  expect_error<ConfigError>([] { Pipeline(small(), PipelineOptions({4}).devices({"tpu:0"})); },
                            {"tpu:0"});
  expect_error<ConfigError>([] { DeviceSpec::parse("cpu:x"); }, {"cpu:x", "'x'"});
}

#ifndef GPIPE_WITH_CUDA
TEST(BadConfig, CudaDeviceInACpuBuild) {
  expect_error<ConfigError>([] { DeviceSpec::parse("cuda:0"); }, {"cuda:0", "CPU-only"});
}
#endif

// Named before the balance is cut into K x v stages, whose error would blame the balance.
TEST(BadConfig, VirtualStagesTheScheduleDoesNotTake) {
  expect_error<ConfigError>(
      [] {
        Pipeline(small(), PipelineOptions({2, 2}).schedule(ScheduleKind::kZBV).virtual_stages(3));
      },
      {"zbv", "got v=3"});
  expect_error<ConfigError>(
      [] {
        Pipeline(small(), PipelineOptions({2, 2}).schedule(ScheduleKind::k1F1B).virtual_stages(2));
      },
      {"1f1b", "got v=2"});
}

TEST(BadConfig, ChunksBelowOne) {
  expect_error<ConfigError>(
      [] {
        Pipeline(small(), PipelineOptions({2, 2}).chunks(0));
      },
      {"got 0"});
}

TEST(BadInput, MoreMicroBatchesThanSamples) {
  Pipeline pipe(small(), PipelineOptions({2, 2}).chunks(8));
  expect_error<InputError>(
      [&] {
        pipe.forward_backward({torch::randn({5, 4})}, torch::randint(0, 2, {5}));
      },
      {"5 samples", "8 micro-batches"});
}

TEST(BadInput, EmptyBatch) {
  Pipeline pipe(small(), PipelineOptions({2, 2}).chunks(2));
  expect_error<InputError>(
      [&] {
        pipe.forward_backward({torch::randn({0, 4})}, torch::randint(0, 2, {0}));
      },
      {"empty", "0 samples"});
}

TEST(BadInput, InputAndTargetBatchSizesDiffer) {
  Pipeline pipe(small(), PipelineOptions({2, 2}).chunks(2));
  expect_error<InputError>(
      [&] {
        pipe.forward_backward({torch::randn({6, 4})}, torch::randint(0, 2, {5}));
      },
      {"input batch size 6", "target batch size 5"});
}

TEST(BadInput, TrainStepWithoutOptimizer) {
  Pipeline pipe(small(), PipelineOptions({2, 2}));
  expect_error<ConfigError>(
      [&] {
        pipe.train_step(torch::randn({4, 4}), torch::zeros({4}, torch::kLong));
      },
      {"set_optimizer"});
}

TEST(BadInput, NonFiniteLossIsRefusedAndParametersStayUntouched) {
  Pipeline pipe(small(), PipelineOptions({2, 2}).chunks(2));
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
  });
  std::vector<torch::Tensor> before;
  for (auto& p : pipe.parameters())
    before.push_back(p.detach().clone());
  auto x = torch::randn({4, 4});
  x[1][2] = std::numeric_limits<float>::quiet_NaN();
  try {
    pipe.train_step(x, torch::zeros({4}, torch::kLong));
    FAIL() << "expected NonFiniteLossError";
  } catch (const NonFiniteLossError& e) {
    EXPECT_TRUE(std::isnan(e.loss()));
    EXPECT_NE(std::string(e.what()).find("nan"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step 0"), std::string::npos) << e.what();
  }
  const auto after = pipe.parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(after[i], before[i]));
    EXPECT_TRUE(!after[i].grad().defined() || after[i].grad().eq(0).all().item<bool>());
  }
  EXPECT_EQ(pipe.step(), 0);
}

TEST(BadConfig, NamesOfModesAndSchedules) {
  expect_error<ConfigError>([] { parse_checkpoint("sometimes"); }, {"sometimes", "except_last"});
  expect_error<ConfigError>([] { parse_schedule_kind("interleaved"); }, {"interleaved", "1f1b"});
}

TEST(ErrorMessage, OneLineWithoutLibTorchsBacktrace) {
  const auto path = std::string(::testing::TempDir()) + "/not_an_archive.pt";
  { std::ofstream(path) << "not a zip archive, only text long enough to be looked at"; }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    ADD_FAILURE() << "no exception thrown";
  } catch (const c10::Error& e) {
    const std::string full = e.what();
    const std::string shown = error_message(e);
    EXPECT_NE(full.find("frame #"), std::string::npos) << "LibTorch's own message had no backtrace";
    EXPECT_EQ(shown.find("frame #"), std::string::npos) << shown;
    EXPECT_EQ(shown.find('\n'), std::string::npos) << shown;
    EXPECT_NE(shown.find("failed reading zip archive"), std::string::npos) << shown;
  }
  EXPECT_EQ(error_message(ConfigError("line one\nline two\n")), "line one line two");
}

// run_parallel runs every index once, each on its own thread (index 0 on the caller's), and
// rethrows the failure of the lowest index that failed after all have finished.
TEST(RunParallel, RunsEveryIndexOnItsOwnThreadAndRethrowsTheFirstFailure) {
  std::mutex mutex;
  std::vector<int> calls(4, 0);
  std::set<std::thread::id> threads;
  run_parallel(4, [&](int64_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    ++calls[i];
    threads.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(calls, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 1u);
  std::vector<int> finished(4, 0);
  try {
    run_parallel(4, [&](int64_t i) {
      if (i >= 2) throw std::runtime_error("index " + std::to_string(i));
      finished[i] = 1;
    });
    FAIL() << "run_parallel swallowed the failures";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "index 2");
  }
  EXPECT_EQ(finished, (std::vector<int>{1, 1, 0, 0}));
}

}  // namespace
}  // namespace gpipe::testing
