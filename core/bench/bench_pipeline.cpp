// gpipe_bench: the reference MLP ([Linear(2048,2048), ReLU] x 8, Linear(2048,10)), batch 1024,
// cross-entropy, SGD, on CPU virtual devices with one intra-op thread each.
//
//   BM_PlainMLP                 plain LibTorch on one thread: the engine's overhead reference
//   BM_PipelineMLP/K:k/M:m      the engine with K stages and M micro-batches, checkpoint never
//   BM_PipelineMLPSchedule/<schedule>/K:2/M:8   the same under every schedule (v = 2 where
//                               it takes virtual stages: stages of 2,2,2,3 layers)
// On a GPU, engine_overhead compares the engine with plain LibTorch, the input placed alike
// (scripts/gpu_check.sh).
//
// items_per_second is samples/s. This machine's speed drifts by several times within minutes,
// so read the figures from repetitions in random order, which spreads the drift over every
// benchmark alike, and compare medians (results/bench/run.sh: --benchmark_repetitions with
// --benchmark_enable_random_interleaving), with nothing else running:
//   pipeline efficiency   K:2/M:8 vs K:1/M:8  (bubble bound 2*8/9 = 1.78x)
//   speedup over naive-2  K:2/M:8 vs K:2/M:1
//   engine overhead       K:1/M:1 vs BM_PlainMLP
//   zero bubble           BM_PipelineMLPSchedule/zb-h1 vs .../gpipe
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "gpipe/gpipe.h"

namespace {

constexpr int64_t kWidth = 2048;
constexpr int64_t kDepth = 8;
constexpr int64_t kClasses = 10;
constexpr int64_t kBatch = 1024;
constexpr double kLearningRate = 0.01;
// Seconds of each CPU benchmark run: a few steps, so that many repetitions fit in minutes.
constexpr double kMinTimeS = 4.0;

struct Batch {
  torch::Tensor x, y;
};

Batch make_batch() {
  torch::manual_seed(0);
  return {torch::randn({kBatch, kWidth}), torch::randint(0, kClasses, {kBatch})};
}

void BM_PlainMLP(benchmark::State& state) {
  at::set_num_threads(1);
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int64_t i = 0; i < kDepth; ++i) {
    model->push_back(torch::nn::Linear(kWidth, kWidth));
    model->push_back(torch::nn::ReLU());
  }
  model->push_back(torch::nn::Linear(kWidth, kClasses));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(kLearningRate));
  const auto batch = make_batch();
  auto step = [&] {
    sgd.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(batch.x), batch.y);
    loss.backward();
    sgd.step();
    return loss.item<double>();
  };
  step();  // warm-up: allocates gradients
  for (auto _ : state)
    benchmark::DoNotOptimize(step());
  state.SetItemsProcessed(state.iterations() * kBatch);
}

// [Linear, ReLU]: the reference MLP's hidden layer.
class HiddenLayer : public gpipe::Layer {
 public:
  explicit HiddenLayer(std::string name) : Layer(std::move(name)) {
    linear_ = register_module("linear", gpipe::Linear(kWidth, kWidth));
  }
  gpipe::Activations forward(const gpipe::Activations& inputs) override {
    return {torch::relu(linear_(inputs.at(0)))};
  }

 private:
  gpipe::Linear linear_{nullptr};
};

// The reference MLP as the engine's layers, built from core alone: kDepth hidden layers, then
// the classifier (the layers of models' make_mlp without dropout or BatchNorm).
gpipe::LayerList make_reference_mlp() {
  gpipe::LayerList layers;
  for (int64_t i = 0; i < kDepth; ++i)
    layers.push_back(std::make_shared<HiddenLayer>("hidden_" + std::to_string(i)));
  layers.push_back(gpipe::make_layer("classifier", gpipe::Linear(kWidth, kClasses)));
  return layers;
}

// K stages on K CPU virtual devices.
void run_pipeline(benchmark::State& state, gpipe::ScheduleKind kind, int64_t K, int64_t M) {
  torch::manual_seed(0);
  auto layers = make_reference_mlp();
  auto options = gpipe::PipelineOptions(std::vector<int64_t>{})
                     .chunks(M)
                     .checkpoint(gpipe::Checkpoint::kNever);
  options.schedule(kind).threads_per_device(1);
  const int64_t v = gpipe::default_virtual_stages(kind);
  if (v == 1) {
    // Balanced by parameter count: 2048x2048 layers split evenly, the classifier rides along.
    std::vector<double> costs;
    for (const auto& layer : layers) {
      double count = 0;
      for (const auto& p : layer->parameters())
        count += static_cast<double>(p.numel());
      costs.push_back(count);
    }
    options.balance(gpipe::balance_by_cost(costs, K));
  } else {
    // Two layers per virtual stage, the classifier with the last: every device gets 4 wide ones.
    std::vector<int64_t> stages(K * v, 2);
    stages.back() += static_cast<int64_t>(layers.size()) - 2 * K * v;
    options.balance(gpipe::sum_per_device(kind, K, stages)).stage_balance(stages);
  }
  gpipe::Pipeline pipe(layers, options);
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(kLearningRate));
  });
  const auto batch = make_batch();
  pipe.train_step(batch.x, batch.y);  // warm-up
  double bubble = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(pipe.train_step(batch.x, batch.y));
    bubble += pipe.last_step().bubble_fraction;
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["bubble"] = bubble / static_cast<double>(state.iterations());
}

void BM_PipelineMLP(benchmark::State& state) {
  run_pipeline(state, gpipe::ScheduleKind::kGPipe, state.range(0), state.range(1));
}

void BM_PipelineMLPSchedule(benchmark::State& state, gpipe::ScheduleKind kind) {
  run_pipeline(state, kind, state.range(0), state.range(1));
}

BENCHMARK(BM_PlainMLP)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(kMinTimeS);
BENCHMARK(BM_PipelineMLP)
    ->ArgNames({"K", "M"})
    ->Args({1, 1})
    ->Args({1, 8})
    ->Args({2, 1})
    ->Args({2, 4})
    ->Args({2, 8})
    ->Args({2, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(kMinTimeS);

}  // namespace

int main(int argc, char** argv) {
  // Idle OpenMP threads must sleep, not spin (docs/design.md, "What this CPU demands"); the
  // runtime reads this at load, so set it and re-execute when it is missing.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    std::vector<char*> args(argv, argv + argc);
    args.push_back(nullptr);
    execv("/proc/self/exe", args.data());
  }
  // Registered by name: a schedule's name ("zb-h1") is not an identifier.
  for (auto kind : gpipe::all_schedule_kinds()) {
    benchmark::RegisterBenchmark(("BM_PipelineMLPSchedule/" + gpipe::to_string(kind)).c_str(),
                                 BM_PipelineMLPSchedule, kind)
        ->ArgNames({"K", "M"})
        ->Args({2, 8})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(kMinTimeS);
  }
  benchmark::Initialize(&argc, argv);
  // One line per unknown flag, exit 2 as every program (gpipe/exit_codes.h).
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  try {
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::cerr << "gpipe_bench: " << gpipe::error_message(e) << "\n";
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}
