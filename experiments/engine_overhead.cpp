// engine_overhead: the engine against a plain LibTorch loop of the same layers, with the input
// placed alike for both.
//
// Why this program exists: a pipeline is worth its machinery only if one stage of it costs what
// the model costs without it. The GPU check once printed "engine overhead 0.75" from a plain
// model fed GPU-resident tensors against the engine fed host tensors, which measures the copy,
// not the engine. Here both contenders take the same batch from the same place:
//   host      the batch lives in host memory and each step copies it to the device (what a
//             training loop fed by a data loader does);
//   resident  the batch already lives on the device.
// The plain loop runs the same layers (the same initial weights, from the same builder) in
// sequence on each of M micro-batches, weights each micro-batch's loss by its share of the
// batch, back-propagates, and takes one SGD step: what the engine's K=1 pipeline with M
// micro-batches computes. Contenders run back to back in interleaved rounds, so a drifting
// machine slows both alike, and each reports the median of its timed steps.
//
//   engine_overhead --model mlp --in-features 2048 --width 2048 --layers 8 --classes 10
//       --batch-size 1024 --device cuda:0 --chunks 1,4,8 --json overhead.json   (one line)
//
// It prints one row per (M, placement): plain ms, engine ms, and plain / engine, the engine's
// efficiency (1.0: no overhead; above 1: the engine is faster).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpipe/exit_codes.h"
#include "gpipe/microbatch.h"
#include "gpipe/models/model_flags.h"
#include "gpipe/models/registry.h"
#include "gpipe/pipeline.h"
#include "gpipe/timing.h"

#include <torch/version.h>

namespace {

using gpipe::models::ModelBuilder;
constexpr double kLearningRate = 0.01;

enum class Placement { kHost, kResident };

std::string to_string(Placement p) {
  return p == Placement::kHost ? "host" : "resident";
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(std::move(params),
                                             torch::optim::SGDOptions(kLearningRate));
}

// The same layers as a plain LibTorch training loop: micro-batches in sequence, one SGD step.
class PlainLoop {
 public:
  PlainLoop(const ModelBuilder& builder, const torch::Device& device, int64_t chunks)
      : layers_(builder.build()), loss_(builder.loss()), device_(device), chunks_(chunks) {
    std::vector<torch::Tensor> params;
    for (auto& layer : layers_) {
      layer->to(device_);
      for (const auto& p : layer->parameters())
        params.push_back(p);
    }
    optimizer_ = make_sgd(params);
  }

  double step(const torch::Tensor& input, const torch::Tensor& target) {
    optimizer_->zero_grad();
    const auto inputs = gpipe::split_microbatches(input.to(device_), chunks_);
    const auto targets = gpipe::split_microbatches(target.to(device_), chunks_);
    torch::Tensor total = torch::zeros({}, torch::TensorOptions().device(device_));
    for (size_t m = 0; m < inputs.size(); ++m) {
      gpipe::Activations x{inputs[m]};
      for (const auto& layer : layers_)
        x = layer->forward(x);
      const double share = static_cast<double>(inputs[m].size(0)) / input.size(0);
      auto loss = loss_(x, targets[m]) * share;
      loss.backward();
      total += loss.detach();
    }
    optimizer_->step();
    return total.item<double>();  // waits for the step, as the engine's train_step does
  }

 private:
  gpipe::LayerList layers_;
  gpipe::LossFn loss_;
  torch::Device device_;
  int64_t chunks_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

struct Row {
  int64_t chunks;
  Placement placement;
  std::vector<double> plain_ms, engine_ms;
};

// Times `steps` calls of `step` after `warmup` untimed ones; appends milliseconds to `out`.
// On a GPU the clock starts and stops with no work queued (the engine reads its loss before
// the optimizer's kernels finish).
template <typename Step>
void time_steps(Step&& step, const torch::Device& device, int64_t warmup, int64_t steps,
                std::vector<double>& out) {
  auto settle = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  for (int64_t i = 0; i < warmup; ++i)
    step();
  for (int64_t i = 0; i < steps; ++i) {
    settle();
    const auto start = std::chrono::steady_clock::now();
    step();
    settle();
    out.push_back(gpipe::elapsed_ms(start));
  }
}

struct Settings {
  gpipe::models::ModelConfig model{"mlp"};
  std::string device = "cuda:0";
  int64_t batch_size = 64;
  std::vector<int64_t> chunks{1, 4, 8};
  std::vector<std::string> inputs{"host", "resident"};
  int64_t rounds = 3;
  int64_t steps = 5;
  int64_t warmup = 2;
  std::string json_path;
};

// Every (M, placement) in every round: the plain loop, then the engine, each on its own copy
// of the model built afresh for that round.
std::vector<Row> measure(const Settings& s) {
  const auto builder = gpipe::models::make_model(s.model);
  const torch::Device device(s.device);
  const auto batch = builder->sample_batch(s.batch_size, /*seed=*/0);
  const auto resident_input = batch.input.to(device), resident_target = batch.target.to(device);
  std::vector<Row> rows;
  for (const auto m : s.chunks)
    for (const auto& name : s.inputs)
      rows.push_back({m, name == "host" ? Placement::kHost : Placement::kResident, {}, {}});
  for (int64_t round = 0; round < s.rounds; ++round) {
    for (auto& row : rows) {
      const bool host = row.placement == Placement::kHost;
      const auto& x = host ? batch.input : resident_input;
      const auto& y = host ? batch.target : resident_target;
      PlainLoop plain(*builder, device, row.chunks);
      time_steps([&] { plain.step(x, y); }, device, s.warmup, s.steps, row.plain_ms);
      gpipe::Pipeline engine(builder->build(),
                             gpipe::PipelineOptions({builder->num_layers()})
                                 .devices({s.device})
                                 .chunks(row.chunks)
                                 .checkpoint(gpipe::Checkpoint::kNever),
                             builder->loss());
      engine.set_optimizer(make_sgd);
      time_steps([&] { engine.train_step(x, y); }, device, s.warmup, s.steps, row.engine_ms);
    }
    spdlog::info("round {}/{} done", round + 1, s.rounds);
  }
  return rows;
}

nlohmann::json report(const Settings& s, const std::vector<Row>& rows) {
  nlohmann::json j = {{"model", gpipe::models::to_json(s.model)},
                      {"device", s.device},
                      {"batch_size", s.batch_size},
                      {"rounds", s.rounds},
                      {"steps_per_round", s.steps},
                      {"warmup_steps", s.warmup},
                      {"torch", TORCH_VERSION},
                      {"rows", nlohmann::json::array()}};
  std::printf("%-4s %-9s %12s %12s %14s\n", "M", "input", "plain ms", "engine ms", "plain/engine");
  for (const auto& row : rows) {
    const double plain = gpipe::median(row.plain_ms), engine = gpipe::median(row.engine_ms);
    std::printf("%-4lld %-9s %12.3f %12.3f %14.3f\n", static_cast<long long>(row.chunks),
                to_string(row.placement).c_str(), plain, engine, plain / engine);
    j["rows"].push_back({{"chunks", row.chunks},
                         {"input", to_string(row.placement)},
                         {"plain_ms_median", plain},
                         {"engine_ms_median", engine},
                         {"plain_over_engine", plain / engine},
                         {"plain_ms", row.plain_ms},
                         {"engine_ms", row.engine_ms}});
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{
      "The engine (K=1, M micro-batches) against a plain LibTorch loop of the same layers, "
      "with the input placed alike for both; prints median ms per step and plain / engine"};
  gpipe::models::add_model_flags(app, s.model);
  app.add_option("--device", s.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--batch-size", s.batch_size, "samples per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--chunks", s.chunks, "M values, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--input", s.inputs, "placements: host (copied each step), resident")
      ->delimiter(',')
      ->check(CLI::IsMember({"host", "resident"}))
      ->capture_default_str();
  app.add_option("--rounds", s.rounds, "interleaved rounds")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  app.add_option("--steps", s.steps, "timed steps per contender and round")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--warmup", s.warmup, "untimed steps before them")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}))
      ->capture_default_str();
  app.add_option("--json", s.json_path, "write the figures and every step's time here");
  if (auto code = gpipe::parse_command_line(app, argc, argv)) return *code;
  try {
    gpipe::DeviceSpec::parse(s.device);  // names a bad or missing device before any work
    for (const auto m : s.chunks)
      GPIPE_CHECK(s.batch_size % m == 0, gpipe::ConfigError, "--batch-size ", s.batch_size,
                  " does not split into --chunks ", m, " equal micro-batches");
    std::ofstream out;
    if (!s.json_path.empty()) {
      out.open(s.json_path);
      GPIPE_CHECK(out.good(), gpipe::ConfigError, "cannot write --json ", s.json_path);
    }
    const auto j = report(s, measure(s));
    if (out.is_open()) out << j.dump(2) << "\n";
    return gpipe::kExitOk;
  } catch (const std::exception& e) {
    std::cerr << "engine_overhead: " << gpipe::error_message(e) << "\n";
    return gpipe::exit_code_for(e);
  }
}
