// engine_overhead: the engine against a plain LibTorch loop of the same layers, with the input
// placed alike for both.
//
// Why this program exists: a pipeline is worth its machinery only if one stage of it costs what
// the model costs without it. A plain model fed device-resident tensors against the engine fed
// host tensors measures the copy, not the engine (the GPU check once printed "engine overhead
// 0.75" that way). Here both contenders take the same batch from the same place:
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

#include <ATen/record_function.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "common/shape_flags.h"
#include "gpipe/exit_codes.h"
#include "gpipe/microbatch.h"
#include "gpipe/models/model_flags.h"
#include "gpipe/models/registry.h"
#include "gpipe/pipeline.h"
#include "gpipe/profile.h"
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
  PlainLoop(const ModelBuilder& builder, const torch::Device& device, int64_t chunks,
            gpipe::Precision precision)
      : layers_(builder.build()),
        loss_(builder.loss()),
        device_(device),
        chunks_(chunks),
        precision_(precision) {
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
      {
        // As torch.autocast around the forward: the loss takes the logits in fp32.
        gpipe::AutocastGuard autocast(precision_, device_.type());
        for (const auto& layer : layers_)
          x = layer->forward(x);
      }
      if (precision_ != gpipe::Precision::kFp32) x = gpipe::cast_floating(x, torch::kFloat);
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
  gpipe::Precision precision_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// Self time per operator over every thread while it lives: each ATen operator and autograd
// node LibTorch records (RecordFunction), less the time of the operators it called, kept apart
// by where it ran: a pipeline device's worker ("cpu:1": that stage's work) or any other thread.
// What a step spends outside any recorded operator (the engine's own work, waiting) is not in
// it. Costs a few microseconds per operator, so steps timed under it are not the figures of
// the table.
class OpTally {
 public:
  struct Entry {
    int64_t calls = 0;
    double self_ms = 0;
  };
  using Totals = std::map<std::string, Entry>;
  using ByThread = std::map<std::string, Totals>;  // by device, or kOtherThreads
  static constexpr const char* kOtherThreads = "other threads";

  OpTally() {
    instance_ = this;
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&OpTally::enter, &OpTally::leave));
  }
  ~OpTally() {
    at::removeCallback(handle_);
    instance_ = nullptr;
  }
  OpTally(const OpTally&) = delete;
  OpTally& operator=(const OpTally&) = delete;

  // Every thread's totals since the last call, summed by where they ran; clears them. Call it
  // while no operator runs (between steps).
  ByThread take() {
    std::lock_guard<std::mutex> lock(mutex_);
    ByThread sum = std::move(ended_);
    ended_.clear();
    for (auto* state : threads_) {
      add(sum[state->where], state->totals);
      state->totals.clear();
    }
    return sum;
  }

  static void add(Totals& sum, const Totals& more) {
    for (const auto& [name, entry] : more) {
      sum[name].calls += entry.calls;
      sum[name].self_ms += entry.self_ms;
    }
  }

  // This thread's key in ByThread: its worker's device, or kOtherThreads.
  static std::string where_this_thread_runs() {
    const auto* device = gpipe::DeviceWorker::current();
    return device ? device->str() : kOtherThreads;
  }

 private:
  struct Frame {
    std::chrono::steady_clock::time_point start;
    double children_ms = 0;
  };
  // One thread's stack and totals; a thread that ends (a pipeline's device worker) hands its
  // totals over.
  struct ThreadState {
    std::vector<Frame> stack;
    Totals totals;
    // A worker sets its device before it runs any operator, so the first one sees it.
    std::string where = where_this_thread_runs();
    ThreadState() {
      std::lock_guard<std::mutex> lock(instance_->mutex_);
      instance_->threads_.push_back(this);
    }
    ~ThreadState() {
      if (instance_ == nullptr) return;
      std::lock_guard<std::mutex> lock(instance_->mutex_);
      add(instance_->ended_[where], totals);
      auto& threads = instance_->threads_;
      threads.erase(std::find(threads.begin(), threads.end(), this));
    }
  };
  static ThreadState& state() {
    thread_local ThreadState s;
    return s;
  }
  static std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction&) {
    state().stack.push_back({std::chrono::steady_clock::now(), 0});
    return nullptr;
  }
  static void leave(const at::RecordFunction& fn, at::ObserverContext*) {
    auto& s = state();
    if (s.stack.empty()) return;  // entered before the tally began
    const auto frame = s.stack.back();
    s.stack.pop_back();
    const double total = gpipe::elapsed_ms(frame.start);
    auto& entry = s.totals[fn.name()];
    entry.calls += 1;
    entry.self_ms += total - frame.children_ms;
    if (!s.stack.empty()) s.stack.back().children_ms += total;
  }

  static inline OpTally* instance_ = nullptr;
  at::CallbackHandle handle_;
  std::mutex mutex_;
  std::vector<ThreadState*> threads_;  // live threads that ran an operator
  ByThread ended_;                     // what threads that ended ran
};

nlohmann::json to_json(const OpTally::Totals& totals, int64_t steps) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, entry] : totals)
    j[name] = {{"calls_per_step", static_cast<double>(entry.calls) / steps},
               {"self_ms_per_step", entry.self_ms / steps}};
  return j;
}

// Every thread's operators summed, and apart by where they ran ("by_thread").
nlohmann::json to_json(const OpTally::ByThread& by_thread, int64_t steps) {
  OpTally::Totals all;
  nlohmann::json apart = nlohmann::json::object();
  for (const auto& [where, totals] : by_thread) {
    OpTally::add(all, totals);
    apart[where] = to_json(totals, steps);
  }
  return {{"all", to_json(all, steps)}, {"by_thread", apart}};
}

struct Row {
  int64_t chunks;
  Placement placement;
  std::vector<double> plain_ms, engine_ms;
  OpTally::ByThread plain_ops, engine_ops;  // with --op-profile: over every timed step
};

// Times `steps` calls of `step` after `warmup` untimed ones; appends milliseconds to `out`, and
// with a tally adds what the timed steps ran to `ops`. On a GPU the clock starts and stops with
// no work queued (the engine reads its loss before the optimizer's kernels finish).
template <typename Step>
void time_steps(Step&& step, const torch::Device& device, int64_t warmup, int64_t steps,
                std::vector<double>& out, OpTally* tally, OpTally::ByThread& ops) {
  auto settle = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  for (int64_t i = 0; i < warmup; ++i)
    step();
  if (tally) tally->take();  // drops the warm-up's operators
  for (int64_t i = 0; i < steps; ++i) {
    settle();
    const auto start = std::chrono::steady_clock::now();
    step();
    settle();
    out.push_back(gpipe::elapsed_ms(start));
  }
  if (tally) {
    for (const auto& [where, totals] : tally->take())
      OpTally::add(ops[where], totals);
  }
}

struct Settings {
  gpipe::models::ModelConfig model{"mlp"};
  std::string device = "cuda:0";
  std::vector<std::string> contenders{"plain", "engine"};
  int threads = 0;  // intra-op threads of the plain loop and of each pipeline device; 0: defaults
  // The engine's K, schedule, v and re-materialisation (common/shape_flags.h); its M are `chunks`.
  gpipe::PipelineShape shape = [] {
    gpipe::PipelineShape out;
    out.K = 1;
    out.checkpoint = gpipe::Checkpoint::kNever;
    return out;
  }();
  std::string balance_by = "params";
  gpipe::Precision precision = gpipe::Precision::kFp32;  // of both contenders
  int64_t batch_size = 64;
  std::vector<int64_t> chunks{1, 4, 8};
  std::vector<std::string> inputs{"host", "resident"};
  int64_t rounds = 3;
  int64_t steps = 5;
  int64_t warmup = 2;
  std::string json_path;
  std::string op_profile_path;
};

// The engine's options for `chunks` micro-batches: the shape's K devices of `s.device` (cpu:0,
// cpu:1, ... or one CUDA device for every stage), its K x v stages balanced by `s.balance_by` on
// one micro-batch.
gpipe::PipelineOptions engine_options(const Settings& s, const gpipe::models::ModelBuilder& builder,
                                      const torch::Tensor& input, int64_t chunks) {
  const gpipe::DeviceSpec device = gpipe::DeviceSpec::parse(s.device);
  auto shape = s.shape;
  if (shape.K == 0) shape.K = 1;
  shape.M = chunks;
  shape.threads = s.threads;
  shape.precision = s.precision;
  for (int64_t k = 0; k < shape.K; ++k)
    shape.devices.push_back(device.is_cuda() ? s.device : "cpu:" + std::to_string(k));
  const int64_t stages = shape.K * shape.virtual_stages();
  // Only several stages need the layers (built and profiled here, then dropped) to balance them.
  gpipe::set_stage_balance(
      shape, stages == 1 ? std::vector<int64_t>{builder.num_layers()}
                         : gpipe::auto_balance(
                               builder.build(), stages, gpipe::parse_balance_by(s.balance_by),
                               {gpipe::split_microbatches(input, chunks).front()}, device,
                               gpipe::ProfileOptions().precision(s.precision)));
  return gpipe::to_pipeline_options(shape);
}

bool runs(const Settings& s, const std::string& contender) {
  return std::find(s.contenders.begin(), s.contenders.end(), contender) != s.contenders.end();
}

// Every (M, placement) in every round: the plain loop, then the engine, each on its own copy
// of the model built afresh for that round.
std::vector<Row> measure(const Settings& s) {
  const auto builder = gpipe::models::make_model(s.model);
  const torch::Device device(s.device);
  const auto batch = builder->sample_batch(s.batch_size, /*seed=*/0);
  const auto resident_input = batch.input.to(device), resident_target = batch.target.to(device);
  std::vector<Row> rows;
  std::vector<gpipe::PipelineOptions> options;
  for (const auto m : s.chunks)
    for (const auto& name : s.inputs) {
      rows.push_back({m, name == "host" ? Placement::kHost : Placement::kResident, {}, {}, {}, {}});
      if (runs(s, "engine")) options.push_back(engine_options(s, *builder, batch.input, m));
    }
  if (s.threads > 0 && runs(s, "plain")) at::set_num_threads(s.threads);
  std::unique_ptr<OpTally> tally;
  if (!s.op_profile_path.empty()) tally = std::make_unique<OpTally>();
  for (int64_t round = 0; round < s.rounds; ++round) {
    for (size_t r = 0; r < rows.size(); ++r) {
      auto& row = rows[r];
      const bool host = row.placement == Placement::kHost;
      const auto& x = host ? batch.input : resident_input;
      const auto& y = host ? batch.target : resident_target;
      if (runs(s, "plain")) {
        PlainLoop plain(*builder, device, row.chunks, s.precision);
        time_steps([&] { plain.step(x, y); }, device, s.warmup, s.steps, row.plain_ms, tally.get(),
                   row.plain_ops);
      }
      if (runs(s, "engine")) {
        gpipe::Pipeline engine(builder->build(), options[r], builder->loss());
        engine.set_optimizer(make_sgd);
        time_steps([&] { engine.train_step(x, y); }, device, s.warmup, s.steps, row.engine_ms,
                   tally.get(), row.engine_ops);
      }
    }
    spdlog::info("round {}/{} done", round + 1, s.rounds);
  }
  return rows;
}

// A contender's median, or JSON null (and "-" in the table) for one that did not run.
nlohmann::json median_or_null(const std::vector<double>& ms) {
  return ms.empty() ? nlohmann::json() : nlohmann::json(gpipe::median(ms));
}

std::string cell(const nlohmann::json& value) {
  char text[32] = "-";
  if (value.is_number()) std::snprintf(text, sizeof text, "%.3f", value.get<double>());
  return text;
}

nlohmann::json report_settings(const Settings& s) {
  return {{"model", gpipe::models::to_json(s.model)},
          {"device", s.device},
          {"contenders", s.contenders},
          {"threads", s.threads},
          {"precision", gpipe::to_string(s.precision)},
          {"partitions", s.shape.K},
          {"schedule", s.shape.schedule_name()},
          {"virtual_stages", s.shape.virtual_stages()},
          {"checkpoint", gpipe::to_string(s.shape.checkpoint)},
          {"balance_by", s.balance_by},
          {"batch_size", s.batch_size},
          {"rounds", s.rounds},
          {"steps_per_round", s.steps},
          {"warmup_steps", s.warmup},
          {"torch", TORCH_VERSION}};
}

nlohmann::json report(const Settings& s, const std::vector<Row>& rows) {
  nlohmann::json j = report_settings(s);
  j["rows"] = nlohmann::json::array();
  std::printf("%-4s %-9s %12s %12s %14s\n", "M", "input", "plain ms", "engine ms", "plain/engine");
  for (const auto& row : rows) {
    const auto plain = median_or_null(row.plain_ms), engine = median_or_null(row.engine_ms);
    const auto ratio = plain.is_number() && engine.is_number()
                           ? nlohmann::json(plain.get<double>() / engine.get<double>())
                           : nlohmann::json();
    std::printf("%-4lld %-9s %12s %12s %14s\n", static_cast<long long>(row.chunks),
                to_string(row.placement).c_str(), cell(plain).c_str(), cell(engine).c_str(),
                cell(ratio).c_str());
    j["rows"].push_back({{"chunks", row.chunks},
                         {"input", to_string(row.placement)},
                         {"plain_ms_median", plain},
                         {"engine_ms_median", engine},
                         {"plain_over_engine", ratio},
                         {"plain_ms", row.plain_ms},
                         {"engine_ms", row.engine_ms}});
  }
  return j;
}

// --op-profile: per row, each contender's operators, per timed step.
nlohmann::json op_profile(const Settings& s, const std::vector<Row>& rows) {
  nlohmann::json j = {{"settings", report_settings(s)}, {"rows", nlohmann::json::array()}};
  for (const auto& row : rows) {
    const auto steps = static_cast<int64_t>(std::max(row.plain_ms.size(), row.engine_ms.size()));
    j["rows"].push_back({{"chunks", row.chunks},
                         {"input", to_string(row.placement)},
                         {"plain", to_json(row.plain_ops, steps)},
                         {"engine", to_json(row.engine_ops, steps)}});
  }
  return j;
}

}  // namespace

// Declares every flag of the program into `s`.
static void add_flags(CLI::App& app, Settings& s) {
  gpipe::models::add_model_flags(app, s.model);
  app.add_option("--device", s.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--contenders", s.contenders,
                 "which to run: plain (the layers as a plain loop on this thread), engine")
      ->delimiter(',')
      ->check(CLI::IsMember({"plain", "engine"}))
      ->capture_default_str();
  app.add_option("--threads", s.threads,
                 "intra-op threads of the plain loop and of each pipeline device (0: LibTorch's "
                 "default for the plain loop, the engine's for the devices)")
      ->check(gpipe::int_range(0, 4096))
      ->capture_default_str();
  int64_t no_planning = 0;  // the devices are --device's
  gpipe::add_shape_flags(app, s.shape, no_planning, "Options",
                         gpipe::ShapeFlagSet().balances(false).chunks(false).placement(false));
  app.get_option("--partitions")
      ->description("the engine's devices K, on cpu:0..K-1 (or all on the one CUDA device)");
  app.add_option("--balance-by", s.balance_by, "the engine's balance for K > 1")
      ->check(CLI::IsMember({"params", "time"}))
      ->capture_default_str();
  gpipe::cli::add_precision_flag(app, s.precision,
                                 "what both contenders compute in: fp32 | bf16 | fp16 (the plain "
                                 "loop under autocast, the loss in fp32, as the engine)");
  app.add_option("--batch-size", s.batch_size, "samples per step")
      ->check(gpipe::int_range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--chunks", s.chunks, "M values, comma-separated")
      ->delimiter(',')
      ->check(gpipe::int_range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--input", s.inputs, "placements: host (copied each step), resident")
      ->delimiter(',')
      ->check(CLI::IsMember({"host", "resident"}))
      ->capture_default_str();
  app.add_option("--rounds", s.rounds, "interleaved rounds")
      ->check(gpipe::int_range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  app.add_option("--steps", s.steps, "timed steps per contender and round")
      ->check(gpipe::int_range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--warmup", s.warmup, "untimed steps before them")
      ->check(gpipe::int_range(int64_t{0}, int64_t{1000}))
      ->capture_default_str();
  app.add_option("--json", s.json_path, "write the figures and every step's time here");
  app.add_option("--op-profile", s.op_profile_path,
                 "write each contender's self time per operator (ATen operators and autograd "
                 "nodes, every thread, per timed step) here; the steps are then timed with the "
                 "profiler's cost in them");
}

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{
      "The engine (K stages, M micro-batches) against a plain LibTorch loop of the same "
      "layers, with the input placed alike for both; prints median ms per step and plain / "
      "engine"};
  add_flags(app, s);
  if (auto code = gpipe::parse_command_line(app, argc, argv)) return *code;
  try {
    // Names a bad or missing device, or a precision it cannot compute, before any work.
    gpipe::check_precision_supported(s.precision, gpipe::DeviceSpec::parse(s.device));
    for (const auto m : s.chunks)
      GPIPE_CHECK(s.batch_size % m == 0, gpipe::ConfigError, "--batch-size ", s.batch_size,
                  " does not split into --chunks ", m, " equal micro-batches");
    std::ofstream out, ops_out;
    if (!s.json_path.empty()) {
      out.open(s.json_path);
      GPIPE_CHECK(out.good(), gpipe::ConfigError, "cannot write --json ", s.json_path);
    }
    if (!s.op_profile_path.empty()) {
      ops_out.open(s.op_profile_path);
      GPIPE_CHECK(ops_out.good(), gpipe::ConfigError, "cannot write --op-profile ",
                  s.op_profile_path);
    }
    const auto rows = measure(s);
    const auto j = report(s, rows);
    if (out.is_open()) out << j.dump(2) << "\n";
    if (ops_out.is_open()) ops_out << op_profile(s, rows).dump(1) << "\n";
    return gpipe::kExitOk;
  } catch (const std::exception& e) {
    std::cerr << "engine_overhead: " << gpipe::error_message(e) << "\n";
    return gpipe::exit_code_for(e);
  }
}
