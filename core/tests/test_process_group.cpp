// The c10d pipeline inside one test process: two ranks, each on its own thread with its own
// Context (TCPStore, Gloo groups, watchdog) and ProcessGroupTransport (receiver threads), train
// the same MLP as the in-process pipeline under every schedule, with dropout, deferred BatchNorm,
// recompute and gradient clipping. Losses and updated parameters must match. Besides checking the
// distributed path without launching processes, this puts the transport's threads under TSan
// (scripts/sanitize.sh --tsan runs core_tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <future>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "gpipe/distributed.h"
#include "gpipe/models/amoebanet.h"
#include "gpipe/pipeline.h"
#include "gpipe/run_parallel.h"
#include "test_util.h"

namespace gpipe::testing {
namespace {

struct RankResult {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> parameters;
  std::map<std::string, torch::Tensor> buffers;  // BatchNorm's running statistics
  int64_t grad_buckets = 0;                      // summed over replicas in the last step
};

constexpr double kClip = 0.1;  // small enough to clip: the norm is summed over every rank

Pipeline::OptimizerFactory sgd() {
  return [](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
  };
}

// Trains `pipe` on each (input, target), checking that every step clips (the update scales the
// gradients in place, so a clipped step leaves them at norm kClip; on ranks, grad_norm is a
// collective every rank calls), and records what the ranks must agree on.
RankResult train(Pipeline& pipe, const std::vector<torch::Tensor>& inputs,
                 const std::vector<torch::Tensor>& targets) {
  pipe.set_optimizer(sgd());
  pipe.set_grad_clip(kClip);
  RankResult result;
  for (size_t step = 0; step < inputs.size(); ++step) {
    // Each rank scatters its own copy of the batch, as separate processes would; sharing one
    // would let the last reference to its storage drop on the other rank's thread.
    result.losses.push_back(pipe.train_step(inputs[step].clone(), targets[step].clone()));
    EXPECT_NEAR(pipe.grad_norm(), kClip, 1e-4) << "step " << step << " must clip";
  }
  result.grad_buckets = pipe.last_step().grad_reduce.buckets;
  for (const auto& [name, p] : pipe.named_parameters())
    result.parameters[name] = p.detach().clone();
  for (const auto& [name, b] : pipe.named_buffers())
    result.buffers[name] = b.detach().clone();
  return result;
}

RankResult train_in_process(const LayerList& layers, const PipelineOptions& options,
                            const std::vector<torch::Tensor>& inputs,
                            const std::vector<torch::Tensor>& targets) {
  Pipeline pipe(layers, options);
  return train(pipe, inputs, targets);
}

using RankTrainer = std::function<RankResult(Pipeline&, const std::vector<torch::Tensor>&,
                                             const std::vector<torch::Tensor>&)>;

// Runs `world` ranks on threads, each with its own Context (TCPStore, Gloo groups, watchdog)
// and ProcessGroupTransport: rank = replica * K + stage, building the layers of its stage from
// `replica_layers[replica]` and training on `batches(replica)` with `trainer`.
std::vector<RankResult> train_ranks(
    int world, const PipelineOptions& options, const std::vector<LayerList>& replica_layers,
    const std::function<std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>(int)>&
        batches,
    const RankTrainer& trainer = train) {
  const int port = distributed::free_local_port();
  EXPECT_GT(port, 0);
  const auto K = static_cast<int64_t>(options.balance().size());
  const auto layout = make_layout(options, static_cast<int64_t>(replica_layers.front().size()));
  auto run_rank = [&](int rank) {
    distributed::Env env;
    env.rank = rank;
    env.world_size = world;
    env.master_addr = "127.0.0.1";
    env.master_port = port;
    distributed::Context context(env, distributed::ContextOptions(K)
                                          .timeout(std::chrono::seconds(30))
                                          .sync_batchnorm(options.sync_batchnorm()));
    LayerList layers;
    for (int64_t i : layout.layers_of(rank % K))
      layers.push_back(replica_layers[static_cast<size_t>(rank / K)][static_cast<size_t>(i)]);
    Pipeline pipe(layers, options, rank % K,
                  std::make_unique<distributed::ProcessGroupTransport>(context), &context);
    const auto [inputs, targets] = batches(static_cast<int>(rank / K));
    return trainer(pipe, inputs, targets);
  };
  // spdlog's default logger is a static of the (uninstrumented) spdlog library whose first use
  // TSan cannot see as initialisation: make it here, before the rank threads log, as the
  // programs do by configuring their sinks before starting any thread.
  spdlog::default_logger_raw();
  std::vector<std::future<RankResult>> others;
  for (int rank = 1; rank < world; ++rank)
    others.push_back(std::async(std::launch::async, run_rank, rank));
  std::vector<RankResult> results{run_rank(0)};
  for (auto& other : others)
    results.push_back(other.get());
  return results;
}

// Every parameter and buffer of `expected` is on exactly one of a replica's ranks, equal.
void expect_replica_matches(const std::vector<RankResult>& ranks, const RankResult& expected) {
  for (const auto& rank : ranks) {
    ASSERT_EQ(rank.losses.size(), expected.losses.size());
    for (size_t step = 0; step < expected.losses.size(); ++step)
      EXPECT_NEAR(rank.losses[step], expected.losses[step], 1e-5) << "step " << step;
  }
  for (const bool buffers : {false, true}) {
    const auto& want = buffers ? expected.buffers : expected.parameters;
    std::set<std::string> names;
    for (const auto& rank : ranks) {
      for (const auto& [name, t] : buffers ? rank.buffers : rank.parameters) {
        EXPECT_TRUE(names.insert(name).second) << name << " is on two ranks";
        ASSERT_EQ(want.count(name), 1u) << name << " is not in the in-process pipeline";
        expect_close(t, want.at(name), 1e-5, 1e-6, name);
      }
    }
    EXPECT_EQ(names.size(), want.size()) << (buffers ? "buffers" : "parameters") << " missing";
  }
}

using Params = std::tuple<ScheduleKind, int64_t>;  // schedule, virtual stages (0: default)

class ProcessGroupPipeline : public ::testing::TestWithParam<Params> {};

TEST_P(ProcessGroupPipeline, TwoRanksTrainAsTheInProcessPipeline) {
  constexpr int kDevices = 2;
  const auto mlp = models::MlpOptions(12, 16, 7, 5).dropout(0.2).batch_norm(true);
  const auto options = PipelineOptions(even_balance(8, kDevices))
                           .chunks(4)
                           .checkpoint(Checkpoint::kExceptLast)
                           .schedule(std::get<0>(GetParam()))
                           .virtual_stages(std::get<1>(GetParam()))
                           .seed(17)
                           .threads_per_device(1);
  torch::manual_seed(3);
  std::vector<torch::Tensor> inputs, targets;
  for (int step = 0; step < 2; ++step) {
    inputs.push_back(torch::randn({16, 12}));
    targets.push_back(torch::randint(0, 5, {16}));
  }
  const auto expected = train_in_process(seeded_mlp(mlp), options, inputs, targets);
  const auto ranks = train_ranks(kDevices, options, {seeded_mlp(mlp)},
                                 [&](int) { return std::make_pair(inputs, targets); });
  expect_replica_matches(ranks, expected);
}

// K=2 stages x R=2 replicas, each replica on half of every batch: the gradients summed over the
// replicas (and the clipping norm over all four ranks) give the in-process pipeline's training
// on the whole batch, under every schedule. Buckets of 256 bytes make several per stage, so the
// communication thread sums them in order while the backward runs (accumulator hooks for B,
// the end of the last W under zero-bubble schedules). No dropout or BatchNorm, whose
// micro-batches would differ.
TEST_P(ProcessGroupPipeline, TwoReplicasOfTwoStagesTrainAsOnePipelineOnTheWholeBatch) {
  const auto mlp = models::MlpOptions(12, 16, 7, 5);
  // M=4 per replica: every schedule runs it (dualpipev needs 2K).
  const auto options = PipelineOptions(even_balance(8, 2))
                           .chunks(4)
                           .seed(17)
                           .schedule(std::get<0>(GetParam()))
                           .virtual_stages(std::get<1>(GetParam()))
                           .bucket_mb(256.0 / (1 << 20));
  torch::manual_seed(3);
  std::vector<torch::Tensor> inputs, targets;
  for (int step = 0; step < 2; ++step) {
    inputs.push_back(torch::randn({16, 12}));
    targets.push_back(torch::randint(0, 5, {16}));
  }
  const auto expected =
      train_in_process(seeded_mlp(mlp), PipelineOptions(options).chunks(8), inputs, targets);
  const auto ranks = train_ranks(4, options, {seeded_mlp(mlp), seeded_mlp(mlp)}, [&](int replica) {
    std::vector<torch::Tensor> half_inputs, half_targets;
    for (size_t step = 0; step < inputs.size(); ++step) {
      half_inputs.push_back(inputs[step].narrow(0, replica * 8, 8));
      half_targets.push_back(targets[step].narrow(0, replica * 8, 8));
    }
    return std::make_pair(half_inputs, half_targets);
  });
  // Both replicas hold the same parameters: compare each with the in-process pipeline.
  expect_replica_matches({ranks[0], ranks[1]}, expected);
  expect_replica_matches({ranks[2], ranks[3]}, expected);
  for (const auto& rank : ranks)
    EXPECT_GT(rank.grad_buckets, 2) << "256-byte buckets: several per stage";
}

// Synchronised BatchNorm: K=2 x R=2 ranks, each replica holding its slice of each of the
// in-process run's M micro-batches of 16/M (as LoaderOptions::shard_microbatches cuts them),
// normalise every micro-batch by its statistics over both replicas (forward, recompute and
// backward) and train exactly as the in-process pipeline on the whole batch of 16, running
// statistics included. `make_layers` builds the model afresh; `sample` is one input's shape.
void expect_synchronised_replicas_match(const std::function<LayerList()>& make_layers,
                                        PipelineOptions options, std::vector<int64_t> sample,
                                        int64_t M) {
  options.chunks(M).seed(17).sync_batchnorm(true);
  sample.insert(sample.begin(), 16);
  torch::manual_seed(3);
  std::vector<torch::Tensor> inputs, targets;
  for (int step = 0; step < 2; ++step) {
    inputs.push_back(torch::randn(sample));
    targets.push_back(torch::randint(0, 5, {16}));
  }
  const auto expected = train_in_process(make_layers(), options, inputs, targets);
  const auto ranks = train_ranks(4, options, {make_layers(), make_layers()}, [&](int replica) {
    std::vector<int64_t> positions;  // replica r: the r-th half of each micro-batch
    const int64_t size = 16 / M, half = size / 2;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t i = 0; i < half; ++i)
        positions.push_back(m * size + replica * half + i);
    }
    const auto rows = torch::tensor(positions);
    std::vector<torch::Tensor> mine_inputs, mine_targets;
    for (size_t step = 0; step < inputs.size(); ++step) {
      mine_inputs.push_back(inputs[step].index_select(0, rows));
      mine_targets.push_back(targets[step].index_select(0, rows));
    }
    return std::make_pair(mine_inputs, mine_targets);
  });
  expect_replica_matches({ranks[0], ranks[1]}, expected);
  expect_replica_matches({ranks[2], ranks[3]}, expected);
}

// An MLP with BatchNorm, under every schedule.
TEST_P(ProcessGroupPipeline, SynchronisedBatchNormTrainsAsOnePipelineOnTheWholeBatch) {
  const auto mlp = models::MlpOptions(12, 16, 7, 5).batch_norm(true);
  expect_synchronised_replicas_match([&] { return seeded_mlp(mlp); },
                                     PipelineOptions(even_balance(8, 2))
                                         .schedule(std::get<0>(GetParam()))
                                         .virtual_stages(std::get<1>(GetParam())),
                                     {12}, /*M=*/4);  // every schedule runs M=4 (dualpipev: 2K)
}

// A convolutional net: AmoebaNet-D's cells, BatchNorm over (N, H, W).
TEST(ProcessGroupPipeline, SynchronisedBatchNormOfAConvNetTrainsAsOnePipeline) {
  const auto amoeba = models::AmoebaNetOptions(3, 16)
                          .classes(5)
                          .image_size(16)
                          .channels(1)
                          .stem_filters(8)
                          .stem_stride(1);
  const auto layers = [&] { return models::AmoebaNetBuilder(amoeba, /*init_seed=*/4).build(); };
  const auto n = static_cast<int64_t>(layers().size());
  expect_synchronised_replicas_match(layers, PipelineOptions(even_balance(n, 2)), {1, 16, 16},
                                     /*M=*/2);
}

// A group whose ranks are threads of this process sums over all of them.
// fp16's loss scaler over ranks: an overflow in rank 1's weight gradients in step 1 (of 3) skips
// that step on both ranks (neither changes a parameter) and halves the scale on both, whatever
// the replicas: K=2 stages x R=2 replicas, the overflow on one replica's second stage alone.
TEST(ProcessGroupLossScaling, OneRanksOverflowSkipsTheStepOnEveryRank) {
  const auto mlp = models::MlpOptions(12, 12, 6, 5);  // 8 layers with the overflow layer
  const auto options = PipelineOptions({4, 4}).chunks(2).threads_per_device(1).loss_scale(
      LossScaleOptions().enabled(true));
  std::vector<LayerList> replicas{seeded_mlp(mlp), with_overflow(seeded_mlp(mlp), 6, 12, 1)};
  replicas[0] = with_overflow(replicas[0], 6, 12, /*step=*/-1);  // same layers, never overflows
  torch::manual_seed(3);
  std::vector<torch::Tensor> inputs, targets;
  for (int step = 0; step < 3; ++step) {
    inputs.push_back(torch::randn({8, 12}));
    targets.push_back(torch::randint(0, 5, {8}));
  }
  const RankTrainer trainer = [](Pipeline& pipe, const std::vector<torch::Tensor>& x,
                                 const std::vector<torch::Tensor>& y) {
    pipe.set_optimizer(sgd());
    RankResult result;
    for (size_t step = 0; step < x.size(); ++step) {
      std::map<std::string, torch::Tensor> before;
      for (const auto& [name, p] : pipe.named_parameters())
        before[name] = p.detach().clone();
      pipe.train_step(x[step].clone(), y[step].clone());
      EXPECT_EQ(pipe.last_step().skipped, step == 1) << "step " << step;
      bool changed = false;
      for (const auto& [name, p] : pipe.named_parameters())
        changed = changed || !torch::equal(p, before.at(name));
      EXPECT_EQ(changed, step != 1) << "step " << step;
      result.losses.push_back(pipe.loss_scaler().scale());
    }
    return result;
  };
  const auto ranks = train_ranks(
      4, options, replicas,
      [&](int replica) {
        std::vector<torch::Tensor> x, y;
        for (size_t s = 0; s < inputs.size(); ++s) {
          x.push_back(inputs[s].narrow(0, replica * 4, 4));
          y.push_back(targets[s].narrow(0, replica * 4, 4));
        }
        return std::make_pair(x, y);
      },
      trainer);
  for (const auto& rank : ranks)
    EXPECT_EQ(rank.losses, (std::vector<double>{65536, 32768, 32768}));  // the scale after each
}

TEST(LocalGlooGroup, SumsOverItsRanksInOneProcess) {
  const auto group = distributed::local_gloo_group(3);
  ASSERT_EQ(group.size(), 3u);
  std::vector<torch::Tensor> values(3);
  run_parallel(3, [&](int64_t r) {
    EXPECT_EQ(group[r]->getRank(), r);
    EXPECT_EQ(group[r]->getSize(), 3);
    std::vector<torch::Tensor> tensors{torch::full({5}, static_cast<float>(r + 1))};
    distributed::start_all_reduce(*group[r], tensors)->wait();
    values[r] = tensors[0];
  });
  for (const auto& v : values)
    EXPECT_TRUE(torch::equal(v, torch::full({5}, 6.0f))) << v;
  EXPECT_CONFIG_ERROR(distributed::local_gloo_group(0), "at least one rank, got 0");
}

// LibTorch 2.x's c10d flight recorder (one per process) notes a group's first collective in a
// map outside its lock, and threads starting the first collectives of their own groups at once
// corrupted it (a segfault in core_tests, in a CI's LibTorch 2.11 run). Every round makes fresh
// one-rank groups, so every start in it is its group's first, and the threads start together.
TEST(StartAllReduce, ThreadsStartTheirGroupsFirstCollectivesAtOnce) {
  constexpr int kThreads = 4, kRounds = 50;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> groups;
    for (int t = 0; t < kThreads; ++t)
      groups.push_back(distributed::local_gloo_group(1)[0]);
    std::atomic<int> ready{0};
    std::vector<float> sums(kThreads, -1);
    run_parallel(kThreads, [&](int64_t t) {
      std::vector<torch::Tensor> tensors{torch::full({3}, static_cast<float>(t))};
      ++ready;
      while (ready.load() < kThreads)
        std::this_thread::yield();
      distributed::start_all_reduce(*groups[t], tensors)->wait();
      sums[t] = tensors[0].sum().item<float>();
    });
    for (int t = 0; t < kThreads; ++t)
      ASSERT_EQ(sums[t], 3.0f * t) << "round " << round << ", thread " << t;
  }
}

// A failure names the dead rank: a suspect that stopped beating before a starved bystander
// that looks stale beside it (CI once saw rank 1's gradient sum with rank 3 fail, rank 3 dead
// and rank 2 starved, and blame rank 2), a third rank when no suspect is stale, the only suspect
// when none is.
TEST(ChooseLostRank, BlamesAStaleSuspectFirst) {
  EXPECT_EQ(distributed::choose_lost_rank({2, 3}, {3}), 3);
  EXPECT_EQ(distributed::choose_lost_rank({2, 3}, {0, 3}), 3);
  EXPECT_EQ(distributed::choose_lost_rank({2}, {3}), 2);
  EXPECT_EQ(distributed::choose_lost_rank({}, {3}), 3);
  EXPECT_EQ(distributed::choose_lost_rank({}, {0, 2, 3}), -1);
  EXPECT_EQ(distributed::choose_lost_rank({}, {}), -1);
}

// K=2 x R=2: each rank's pipeline peers are its replica's other stage, its data-parallel peers
// the other replica's rank of its stage, its world peers everyone else.
TEST(ContextPeers, EachGroupNamesItsOtherMembers) {
  const int port = distributed::free_local_port();
  ASSERT_GT(port, 0);
  spdlog::default_logger_raw();
  using Peers = std::vector<int>;
  std::vector<std::array<Peers, 3>> peers(4);
  run_parallel(4, [&](int64_t rank) {
    distributed::Env env;
    env.rank = static_cast<int>(rank);
    env.world_size = 4;
    env.master_addr = "127.0.0.1";
    env.master_port = port;
    distributed::Context context(env,
                                 distributed::ContextOptions(2).timeout(std::chrono::seconds(30)));
    peers[rank] = {context.peers_in(context.pipeline_group()),
                   context.peers_in(context.data_parallel_group()),
                   context.peers_in(context.world_group())};
  });
  EXPECT_EQ(peers[0][0], Peers({1}));
  EXPECT_EQ(peers[1][0], Peers({0}));
  EXPECT_EQ(peers[2][0], Peers({3}));
  EXPECT_EQ(peers[3][0], Peers({2}));
  EXPECT_EQ(peers[0][1], Peers({2}));
  EXPECT_EQ(peers[1][1], Peers({3}));
  EXPECT_EQ(peers[3][1], Peers({1}));
  EXPECT_EQ(peers[1][2], Peers({0, 2, 3}));
  EXPECT_EQ(peers[3][2], Peers({0, 1, 2}));
}

INSTANTIATE_TEST_SUITE_P(Schedules, ProcessGroupPipeline, ::testing::ValuesIn([] {
                           std::vector<Params> params;
                           for (auto kind : all_schedule_kinds())
                             params.emplace_back(kind,
                                                 kind == ScheduleKind::kInterleaved1F1B ? 2 : 0);
                           return params;
                         }()),
                         [](const ::testing::TestParamInfo<Params>& info) {
                           std::string name = to_string(std::get<0>(info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace gpipe::testing
