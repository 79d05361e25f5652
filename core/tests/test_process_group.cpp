// The c10d pipeline inside one test process: two ranks, each on its own thread with its own
// Context (TCPStore, Gloo groups, watchdog) and ProcessGroupTransport (receiver threads), train
// the same MLP as the in-process pipeline under every schedule, with dropout, deferred BatchNorm,
// recompute and gradient clipping. Losses and updated parameters must match. Besides checking the
// distributed path without launching processes, this puts the transport's threads under TSan
// (scripts/sanitize.sh --tsan runs core_tests).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <future>

#include <spdlog/spdlog.h>

#include "gpipe/distributed.h"
#include "test_util.h"

namespace gpipe::testing {
namespace {

// A TCP port nobody listens on now (the kernel's pick for port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  if (fd >= 0) ::close(fd);
  return ok ? ntohs(address.sin_port) : 0;
}

struct RankResult {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> parameters;
};

using Params = std::tuple<ScheduleKind, int64_t>;  // schedule, virtual stages (0: default)

class ProcessGroupPipeline : public ::testing::TestWithParam<Params> {};

TEST_P(ProcessGroupPipeline, TwoRanksTrainAsTheInProcessPipeline) {
  const auto kind = std::get<0>(GetParam());
  const auto virtual_stages = std::get<1>(GetParam());
  constexpr int64_t kDevices = 2;
  constexpr int64_t kSteps = 2;
  const auto mlp = models::MlpOptions(12, 16, 7, 5).dropout(0.2).batch_norm(true);
  const auto options = PipelineOptions(even_balance(8, kDevices))
                           .chunks(4)
                           .checkpoint(Checkpoint::kExceptLast)
                           .schedule(kind)
                           .virtual_stages(virtual_stages)
                           .seed(17)
                           .threads_per_device(1);
  const auto sgd = [](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
  };
  constexpr double kClip = 0.5;  // small enough to clip: the norm is summed over both ranks
  torch::manual_seed(3);
  std::vector<torch::Tensor> inputs, targets;
  for (int64_t step = 0; step < kSteps; ++step) {
    inputs.push_back(torch::randn({16, 12}));
    targets.push_back(torch::randint(0, 5, {16}));
  }

  RankResult expected;
  {
    Pipeline pipe(seeded_mlp(mlp), options);
    pipe.set_optimizer(sgd);
    pipe.set_grad_clip(kClip);
    for (int64_t step = 0; step < kSteps; ++step)
      expected.losses.push_back(pipe.train_step(inputs[step], targets[step]));
    for (const auto& [name, p] : pipe.named_parameters())
      expected.parameters[name] = p.detach().clone();
  }

  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto all_layers = seeded_mlp(mlp);
  const auto layout = make_layout(options, static_cast<int64_t>(all_layers.size()));
  auto run_rank = [&](int rank) {
    distributed::Env env;
    env.rank = rank;
    env.world_size = static_cast<int>(kDevices);
    env.master_addr = "127.0.0.1";
    env.master_port = port;
    distributed::Context context(
        env, distributed::ContextOptions(kDevices).timeout(std::chrono::seconds(30)));
    LayerList layers;
    for (int64_t i : layout.layers_of(rank))
      layers.push_back(all_layers[i]);
    Pipeline pipe(layers, options, rank,
                  std::make_unique<distributed::ProcessGroupTransport>(context), &context);
    pipe.set_optimizer(sgd);
    pipe.set_grad_clip(kClip);
    RankResult result;
    for (int64_t step = 0; step < kSteps; ++step) {
      // Each rank scatters its own copy of the batch, as separate processes would; sharing one
      // would let the last reference to its storage drop on the other rank's thread.
      result.losses.push_back(pipe.train_step(inputs[step].clone(), targets[step].clone()));
    }
    for (const auto& [name, p] : pipe.named_parameters())
      result.parameters[name] = p.detach().clone();
    return result;
  };
  // spdlog's default logger is a static of the (uninstrumented) spdlog library whose first use
  // TSan cannot see as initialisation: make it here, before the rank threads log, as the
  // programs do by configuring their sinks before starting any thread.
  spdlog::default_logger_raw();
  auto rank1 = std::async(std::launch::async, run_rank, 1);
  const RankResult rank0 = run_rank(0);
  const RankResult other = rank1.get();

  for (const RankResult* rank : {&rank0, &other}) {
    ASSERT_EQ(rank->losses.size(), expected.losses.size());
    for (size_t step = 0; step < expected.losses.size(); ++step)
      EXPECT_NEAR(rank->losses[step], expected.losses[step], 1e-5) << "step " << step;
  }
  size_t seen = 0;
  for (const RankResult* rank : {&rank0, &other}) {
    for (const auto& [name, p] : rank->parameters) {
      expect_close(p, expected.parameters.at(name), 1e-5, 1e-6, name);
      ++seen;
    }
  }
  EXPECT_EQ(seen, expected.parameters.size()) << "each parameter lives on exactly one rank";
}

INSTANTIATE_TEST_SUITE_P(Schedules, ProcessGroupPipeline,
                         ::testing::Values(Params{ScheduleKind::kGPipe, 0},
                                           Params{ScheduleKind::k1F1B, 0},
                                           Params{ScheduleKind::kInterleaved1F1B, 2},
                                           Params{ScheduleKind::kZBH1, 0},
                                           Params{ScheduleKind::kZBV, 0}),
                         [](const ::testing::TestParamInfo<Params>& info) {
                           std::string name = to_string(std::get<0>(info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace gpipe::testing
