// The partitioner is exact: it matches brute force on random instances.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "test_util.h"

namespace gpipe::testing {
namespace {

// Smallest possible largest stage over every composition of n layers into k stages.
double brute_force(const std::vector<double>& costs, size_t start, int64_t k) {
  const auto n = static_cast<int64_t>(costs.size() - start);
  if (k == 1) {
    double sum = 0;
    for (size_t i = start; i < costs.size(); ++i)
      sum += costs[i];
    return sum;
  }
  double best = std::numeric_limits<double>::infinity();
  double first = 0;
  for (int64_t take = 1; take <= n - (k - 1); ++take) {
    first += costs[start + take - 1];
    best = std::min(best, std::max(first, brute_force(costs, start + take, k - 1)));
  }
  return best;
}

TEST(Partition, MatchesBruteForceOnRandomInstances) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + trial % 11;
    const int64_t k = 1 + (trial / 11) % n;
    std::vector<double> costs(n);
    for (auto& c : costs)
      c = trial % 5 == 0 ? std::floor(cost(rng)) : cost(rng);  // with ties
    const auto balance = balance_by_cost(costs, k);
    ASSERT_EQ(static_cast<int64_t>(balance.size()), k);
    EXPECT_EQ(std::accumulate(balance.begin(), balance.end(), int64_t{0}), n);
    for (int64_t b : balance)
      EXPECT_GE(b, 1);
    EXPECT_NEAR(max_stage_cost(costs, balance), brute_force(costs, 0, k), 1e-9)
        << "trial " << trial << " n=" << n << " k=" << k;
  }
}

TEST(Partition, KeepsTheSmallClassifierWithTheLastStage) {
  // Eight equal layers and a light head: 4 | 4 + head, not 5 | 3 + head.
  std::vector<double> costs(8, 4.2e6);
  costs.push_back(2e4);
  EXPECT_EQ(balance_by_cost(costs, 2), (std::vector<int64_t>{4, 5}));
}

TEST(Partition, Errors) {
  EXPECT_THROW(balance_by_cost({1, 2}, 3), ConfigError);
  EXPECT_THROW(balance_by_cost({1, 2}, 0), ConfigError);
  EXPECT_THROW(balance_by_cost({1, -2}, 1), ConfigError);
  EXPECT_THROW(balance_by_cost({1, std::nan("")}, 1), ConfigError);
  EXPECT_THROW(parse_balance_by("flops"), ConfigError);
}

// Profiling runs BatchNorm's forward several times, none of them a training step: a trainer
// that balances by time must start from the layer it would have had without profiling.
TEST(Profile, LeavesBatchNormStatisticsAsItFoundThem) {
  torch::manual_seed(0);
  DeferredBatchNorm profiled(8), fresh(8);
  profile_layers({make_layer("bn", profiled)}, {torch::randn({16, 8}) * 3 + 1},
                 DeviceSpec{torch::kCPU, 31}, ProfileOptions().warmup(1).iterations(2));
  const auto x = torch::randn({16, 8});
  profiled->forward(x);  // a plain call is its own mini-batch: it updates the running statistics
  fresh->forward(x);
  EXPECT_TRUE(torch::allclose(profiled->running_mean, fresh->running_mean));
  EXPECT_TRUE(torch::allclose(profiled->running_var, fresh->running_var));
}

TEST(Profile, CostsFollowTheLayerSizes) {
  torch::manual_seed(0);
  LayerList layers{make_layer("small", torch::nn::Linear(64, 64)),
                   make_layer("big", torch::nn::Linear(64, 1024)),
                   make_layer("head", torch::nn::Linear(1024, 4))};
  const Activations sample{torch::randn({256, 64})};
  const auto profiles = profile_layers(layers, sample, DeviceSpec{torch::kCPU, 30},
                                       ProfileOptions().warmup(1).iterations(3));
  ASSERT_EQ(profiles.size(), 3u);
  EXPECT_EQ(profiles[1].parameter_bytes, (64 * 1024 + 1024) * 4);
  // The big layer's output (256 x 1024 floats) is kept for backward.
  EXPECT_GE(profiles[1].activation_bytes, 256 * 1024 * 4);
  EXPECT_GT(profiles[1].forward_ms + profiles[1].backward_ms,
            profiles[0].forward_ms + profiles[0].backward_ms);
  for (const auto& p : profiles) {
    EXPECT_GT(p.no_grad_forward_ms, 0);
    EXPECT_GT(p.recompute_ms, 0);
  }
  for (const auto& layer : layers) {
    for (const auto& p : layer->parameters())
      EXPECT_FALSE(p.grad().defined());
  }
  const auto params = layer_costs(layers, BalanceBy::kParams);
  EXPECT_EQ(params[0], 64 * 64 + 64);
  EXPECT_EQ(auto_balance(layers, 2, BalanceBy::kParams), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(auto_balance(layers, 3, BalanceBy::kTime, sample).size(), 3u);
  EXPECT_EQ(auto_balance(layers, 2, BalanceBy::kMemory, sample).size(), 2u);
}

// A layer with parameters defers a W, so its backward is timed whole too (as schedules that do
// not split run it); a layer without runs one backward either way, timed once.
TEST(Profile, TimesTheBackwardWholeWhereALayerDefersAW) {
  torch::manual_seed(0);
  LayerList layers{make_layer("linear", torch::nn::Linear(64, 256)),
                   make_function_layer("relu", [](const Activations& in) {
                     return Activations{torch::relu(in[0])};
                   })};
  const auto profiles =
      profile_layers(layers, {torch::randn({128, 64})}, DeviceSpec{torch::kCPU, 28},
                     ProfileOptions().warmup(1).iterations(3));
  EXPECT_GT(profiles[0].weight_ms, 0);
  EXPECT_GT(profiles[0].fused_backward_ms, 0);
  EXPECT_EQ(profiles[1].weight_ms, 0);
  EXPECT_EQ(profiles[1].fused_backward_ms, profiles[1].backward_ms);
  for (const auto& p : layers[0]->parameters())
    EXPECT_FALSE(p.grad().defined());
}

// A layer that counts its forwards (`grad_calls`: those recording autograd, as a kept F and a
// recompute run) and sleeps `ms(n)` in the n-th of those, 1 ms in the others.
LayerPtr counting_layer(int& calls, int& grad_calls, std::function<int(int)> ms) {
  return make_function_layer("sleep", [&calls, &grad_calls, ms](const Activations& in) {
    ++calls;
    const int sleep = torch::GradMode::is_enabled() ? ms(++grad_calls) : 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep));
    return Activations{in[0] * 2};
  });
}

// A layer without BatchNorm replays its kept forward exactly, so its recompute is not timed
// apart; with `settle`, runs that agree end the profile after two timed runs, runs that do not
// take every iteration.
TEST(Profile, TimesEachForwardOnlyWhileItCanChange) {
  const Activations sample{torch::ones({4, 4})};
  const DeviceSpec device{torch::kCPU, 29};
  const auto options = ProfileOptions().warmup(1).iterations(3);
  int calls = 0, grad_calls = 0;
  auto steady = counting_layer(calls, grad_calls, [](int) { return 2; });
  const auto profile = profile_layers({steady}, sample, device, options).at(0);
  EXPECT_EQ(calls, 1 + 3 * 2);  // the warm-up's kept F, then a checkpointed F and a kept F a run
  EXPECT_EQ(profile.recompute_ms, profile.forward_ms);
  calls = grad_calls = 0;
  // Within 100x: only the mechanism is under test, not the machine's jitter.
  profile_layers({steady}, sample, device, ProfileOptions(options).settle(100));
  EXPECT_EQ(calls, 1 + 2 * 2);
  calls = grad_calls = 0;
  // The kept forwards of the timed runs sleep 1, 20, 1 ms: the first two disagree.
  auto unsteady = counting_layer(calls, grad_calls, [](int n) { return n % 2 == 1 ? 20 : 1; });
  profile_layers({unsteady}, sample, device, ProfileOptions(options).settle(1));
  EXPECT_EQ(calls, 1 + 3 * 2);
  EXPECT_THROW(profile_layers({steady}, sample, device, ProfileOptions(options).settle(-1)),
               ConfigError);
}

}  // namespace
}  // namespace gpipe::testing
