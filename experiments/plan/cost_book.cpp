#include "plan/cost_book.h"

#include <spdlog/spdlog.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gpipe/distributed.h"
#include "gpipe/errors.h"
#include "gpipe/files.h"
#include "gpipe/memory.h"
#include "gpipe/run_parallel.h"
#include "gpipe/timeline.h"
#include "gpipe/timing.h"

namespace gpipe::plan {
namespace {

// What makes a measurement this machine's: host name, cores and processor model.
nlohmann::json machine() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  return {{"host", host}, {"cores", std::thread::hardware_concurrency()}, {"cpu", cpu}};
}

// A layer's profile stops after two timed runs that agree within this fraction (ProfileOptions::
// settle): its median then differs from that of three runs by at most half of it, and planning a
// Transformer spends most of its time profiling.
constexpr double kProfileSettle = 0.05;

nlohmann::json to_json(const MicrobatchCosts& c, int threads) {
  const auto& l = c.layers;
  return {{"microbatch", l.microbatch},
          {"threads", threads},
          {"forward_ms", l.forward_ms},
          {"no_grad_forward_ms", l.no_grad_forward_ms},
          {"recompute_ms", l.recompute_ms},
          {"backward_ms", l.backward_ms},
          {"weight_ms", l.weight_ms},
          {"fused_backward_ms", l.fused_backward_ms},
          {"update_ms", l.update_ms},
          {"output_bytes", l.output_bytes},
          {"parameter_bytes", l.parameter_bytes},
          {"activation_bytes", l.activation_bytes},
          {"backward_bytes", l.backward_bytes},
          {"weight_bytes", l.weight_bytes},
          {"loss_forward_ms", l.loss_forward_ms},
          {"loss_backward_ms", l.loss_backward_ms},
          {"input_bytes", c.input_bytes}};
}

MicrobatchCosts from_json(const nlohmann::json& j) {
  MicrobatchCosts c;
  auto& l = c.layers;
  j.at("microbatch").get_to(l.microbatch);
  GPIPE_CHECK(l.microbatch >= 1, InputError, "costs of micro-batch ", l.microbatch);
  j.at("forward_ms").get_to(l.forward_ms);
  // Absent from caches written before they were measured: those forwards are then priced as the
  // kept forward.
  if (j.contains("no_grad_forward_ms")) j.at("no_grad_forward_ms").get_to(l.no_grad_forward_ms);
  if (j.contains("recompute_ms")) j.at("recompute_ms").get_to(l.recompute_ms);
  j.at("backward_ms").get_to(l.backward_ms);
  j.at("weight_ms").get_to(l.weight_ms);
  // Absent from caches written before it was measured: every schedule is then priced with the
  // split backward.
  if (j.contains("fused_backward_ms")) j.at("fused_backward_ms").get_to(l.fused_backward_ms);
  j.at("update_ms").get_to(l.update_ms);
  j.at("output_bytes").get_to(l.output_bytes);
  j.at("parameter_bytes").get_to(l.parameter_bytes);
  j.at("activation_bytes").get_to(l.activation_bytes);
  j.at("backward_bytes").get_to(l.backward_bytes);
  // Absent from caches written before it was measured: the memory model then holds the
  // activations of the layers with a W until W.
  if (j.contains("weight_bytes")) j.at("weight_bytes").get_to(l.weight_bytes);
  j.at("loss_forward_ms").get_to(l.loss_forward_ms);
  j.at("loss_backward_ms").get_to(l.loss_backward_ms);
  j.at("input_bytes").get_to(c.input_bytes);
  // A time or size below 0, or not finite, was never measured.
  const std::pair<const char*, const std::vector<double>*> lists[] = {
      {"forward_ms", &l.forward_ms},
      {"no_grad_forward_ms", &l.no_grad_forward_ms},
      {"recompute_ms", &l.recompute_ms},
      {"backward_ms", &l.backward_ms},
      {"weight_ms", &l.weight_ms},
      {"fused_backward_ms", &l.fused_backward_ms},
      {"update_ms", &l.update_ms},
      {"output_bytes", &l.output_bytes},
      {"parameter_bytes", &l.parameter_bytes},
      {"activation_bytes", &l.activation_bytes},
      {"backward_bytes", &l.backward_bytes},
      {"weight_bytes", &l.weight_bytes}};
  for (const auto& [name, values] : lists) {
    for (const double value : *values) {
      GPIPE_CHECK(std::isfinite(value) && value >= 0, InputError, name, " holds ", value,
                  ", which no measurement gives");
    }
  }
  for (const double value : {l.loss_forward_ms, l.loss_backward_ms, c.input_bytes}) {
    GPIPE_CHECK(std::isfinite(value) && value >= 0, InputError, "a loss time or input size of ",
                value, ", which no measurement gives");
  }
  return c;
}

// The format of a cost cache file: a JSON object of entries, one per model, machine and
// LibTorch, each carrying its fingerprint.
constexpr const char* kCacheFormat = "gpipe-cost-cache-v2";

// The cost cache at `path` ({} when there is none yet). A file that is not one (not a regular
// file, not a JSON object of that format) is refused with ConfigError naming it: it is never
// written over.
nlohmann::json read_cache(const std::string& path) {
  if (path.empty() || !std::filesystem::exists(path)) return {{"format", kCacheFormat}};
  const auto text = read_file(path, "--cache", int64_t{1} << 28);
  auto cache = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // A cache of the format before fingerprints: an object of entries that each hold "costs".
  // Kept as a cache (its entries, without fingerprints, are measured again).
  const bool older = cache.is_object() && !cache.contains("format") && !cache.empty() &&
                     std::all_of(cache.begin(), cache.end(), [](const nlohmann::json& entry) {
                       return entry.is_object() && entry.contains("costs");
                     });
  if (older) {
    spdlog::warn("'{}' is a cost cache of an older format: its entries are measured again",
                 printable(path));
    cache["format"] = kCacheFormat;
  }
  GPIPE_CHECK(cache.is_object() && cache.value("format", "") == kCacheFormat, ConfigError,
              "--cache '", printable(path), "' is not a gpipe cost cache (",
              cache.is_discarded() ? "not JSON"
              : cache.is_object()  ? "no \"format\": \"" + std::string(kCacheFormat) + "\""
                                   : "JSON but not an object",
              "); it is left alone: give a new file name, or delete it");
  return cache;
}

// The fingerprint of a cache entry measured for `key` (the model, machine, LibTorch and device):
// a checksum of the key and the entry's contents, so an entry moved under another key, or
// edited, no longer matches.
std::string entry_fingerprint(const std::string& key, nlohmann::json entry) {
  entry.erase("fingerprint");
  Checksum checksum;
  const auto text = key + "\n" + entry.dump();
  checksum.update(text.data(), text.size());
  return checksum.hex();
}

}  // namespace

void seal_cost_cache(nlohmann::json& cache) {
  for (auto& [key, entry] : cache.items()) {
    if (entry.is_object()) entry["fingerprint"] = entry_fingerprint(key, entry);
  }
}

CostBook::CostBook(models::ModelConfig model, Pipeline::OptimizerFactory optimizer,
                   std::string cache, uint64_t seed, std::vector<std::string> devices,
                   Precision precision)
    : model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      cache_path_(std::move(cache)),
      devices_(std::move(devices)),
      seed_(seed),
      precision_(precision) {
  model_.init_seed = seed;
  num_layers_ = models::make_model(model_)->num_layers();
  auto key = nlohmann::json{{"model", models::to_json(model_)},
                            {"machine", machine()},
                            {"libtorch", TORCH_VERSION},
                            {"devices", devices_.empty() ? "cpu" : devices_.front()}};
  // fp32 keys stay as they were before precisions existed, so their caches stay valid.
  if (precision_ != Precision::kFp32) key["precision"] = to_string(precision_);
  key_ = key.dump();
  const auto cache_json = read_cache(cache_path_);
  if (!cache_json.contains(key_)) return;
  try {
    const auto& entries = cache_json.at(key_);
    GPIPE_CHECK(
        entries.is_object() && entries.value("fingerprint", "") == entry_fingerprint(key_, entries),
        InputError,
        "its fingerprint does not match: it was measured for another model or machine, "
        "or edited");
    if (entries.contains("state_slots")) state_slots_ = entries.at("state_slots").get<int64_t>();
    if (entries.contains("calibration"))
      calibration_ = costs::calibrations_from_json(entries.at("calibration"));
    if (entries.contains("allreduce")) entries.at("allreduce").get_to(allreduce_);
    GPIPE_CHECK(entries.at("costs").is_array(), InputError,
                "its costs are named by text, as caches were before typed keys");
    for (const auto& value : entries.at("costs")) {
      auto costs = from_json(value);
      costs.layers.precision = precision_;  // the key's
      const int threads = value.at("threads").get<int>();
      GPIPE_CHECK(threads >= 1, InputError, "costs of ", threads, " threads");
      costs_[{costs.layers.microbatch, threads}] = std::move(costs);
    }
  } catch (const std::exception& e) {
    spdlog::warn("ignoring the entry of the cost cache '{}' for this model ({}); measuring again",
                 printable(cache_path_), error_message(e));
    costs_.clear();
    calibration_ = {};
    allreduce_.clear();
    state_slots_ = -1;
  }
}

const MicrobatchCosts& CostBook::at(int64_t microbatch, int threads) {
  GPIPE_CHECK(microbatch >= 1 && threads >= 1, ConfigError,
              "costs need a micro-batch >= 1 and threads >= 1, got ", microbatch, " and ", threads);
  const auto found = costs_.find({microbatch, threads});
  if (found != costs_.end()) return found->second;
  spdlog::info("measuring {} layers at micro-batch {} with {} thread(s)", num_layers_, microbatch,
               threads);
  const auto builder = models::make_model(model_);
  const auto sample = builder->sample_batch(microbatch, seed_ + 2);
  MicrobatchCosts costs;
  costs.layers = costs::measure_layer_costs(
      builder->build(), sample, builder->loss(),
      DeviceSpec::parse(devices_.empty() ? "cpu:0" : devices_.front()), optimizer_,
      ProfileOptions()
          .warmup(1)
          .iterations(3)
          .threads(threads)
          .settle(kProfileSettle)
          .precision(precision_));
  costs.input_bytes = static_cast<double>(sample.input.nbytes());
  ++measured_;
  auto& stored = costs_[{microbatch, threads}] = std::move(costs);
  save();
  return stored;
}

costs::CalibrationKey CostBook::calibration_key(int64_t microbatch, int threads, int64_t stages,
                                                int64_t replicas, int64_t max_chunks,
                                                Checkpoint checkpoint,
                                                costs::ScheduleFamily family) const {
  GPIPE_CHECK(stages >= 1 && replicas >= 1 && max_chunks >= 1, ConfigError,
              "calibration needs stages, replicas and max_chunks >= 1, got ", stages, ", ",
              replicas, " and ", max_chunks);
  costs::CalibrationKey key;
  key.microbatch = microbatch;
  key.threads = threads;
  key.K = std::min(stages, num_layers_);
  // With 2K micro-batches both ends of the pipeline are busy at once for most of the step.
  key.M = std::min(2 * key.K, max_chunks);
  key.replicas = replicas;
  key.checkpoint = checkpoint;
  key.family = key.K == 1 ? costs::ScheduleFamily::kFused : family;
  const auto kind = costs::representative(key.family);
  const int64_t v = default_virtual_stages(kind);
  if (key.K * v > num_layers_ || !schedule_shape_error(kind, key.K, key.M, v).empty())
    key.family = costs::ScheduleFamily::kFused;
  return key;
}

double CostBook::calibration(const costs::CalibrationKey& key) {
  const auto in_use = calibration_in_use(key);
  if (calibration_.has(in_use)) return calibration_.median(in_use);
  calibration_.add(in_use, measure_calibration(in_use));
  save();
  return calibration_.median(in_use);
}

int64_t CostBook::calibrate_in_rounds(const std::vector<costs::CalibrationKey>& keys, int rounds,
                                      int extra_rounds, double unsettled) {
  const int64_t made = calibration_.measure_in_rounds(
      keys, rounds, extra_rounds, unsettled,
      [this](const costs::CalibrationKey& key) { return measure_calibration(key); });
  if (made > 0) save();
  return made;
}

costs::CalibrationKey CostBook::calibration_in_use(const costs::CalibrationKey& key) const {
  return calibration_.has(key) ? key : key.screening();
}

double CostBook::measure_calibration(const costs::CalibrationKey& key, int warmup) {
  const auto& costs = at(key.microbatch, key.threads).layers;
  const auto builder = models::make_model(model_);
  return costs::measure_calibration(
             *builder, costs, key, optimizer_,
             costs::CalibrationOptions().devices(devices_).seed(seed_).warmup(warmup).precision(
                 precision_))
      .ratio();
}

double CostBook::allreduce_ms(int64_t stages, int64_t replicas, double bytes) {
  GPIPE_CHECK(stages >= 1 && replicas >= 2 && bytes >= 0, ConfigError,
              "an all-reduce needs stages >= 1, replicas >= 2 and bytes >= 0, got ", stages, ", ",
              replicas, " and ", bytes);
  const int64_t mib = std::max<int64_t>(1, std::llround(bytes / (1 << 20)));
  const AllReduceKey name{stages, replicas, mib};
  const auto found = allreduce_.find(name);
  if (found != allreduce_.end()) return found->second;
  spdlog::info("timing the gradient all-reduce: {} group(s) of {} replicas, {} MiB each", stages,
               replicas, mib);
  std::vector<std::vector<c10::intrusive_ptr<c10d::ProcessGroup>>> groups;
  for (int64_t k = 0; k < stages; ++k)
    groups.push_back(distributed::local_gloo_group(static_cast<int>(replicas)));
  const int64_t numel = mib << 18;  // floats
  const auto bucket =
      static_cast<int64_t>(PipelineOptions(std::vector<int64_t>{1}).bucket_mb() * (1 << 18));
  constexpr int kWarmup = 1, kRepeats = 3;
  std::vector<std::vector<double>> times(stages * replicas);
  run_parallel(stages * replicas, [&](int64_t i) {
    at::set_num_threads(1);
    auto& group = groups[i / replicas][i % replicas];
    auto gradients = torch::ones({numel});
    for (int repeat = 0; repeat < kWarmup + kRepeats; ++repeat) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t offset = 0; offset < numel; offset += bucket) {
        std::vector<torch::Tensor> flat{
            gradients.narrow(0, offset, std::min(bucket, numel - offset))};
        distributed::start_all_reduce(*group, flat)->wait();
      }
      if (repeat >= kWarmup) times[i].push_back(elapsed_ms(start));
    }
  });
  double slowest = 0;
  for (const auto& t : times)
    slowest = std::max(slowest, median(t));
  allreduce_[name] = slowest;
  save();
  return slowest;
}

int64_t CostBook::state_slots() {
  if (state_slots_ >= 0) return state_slots_;
  memory::install();
  const auto device = DeviceSpec::parse("cpu:0");
  DeviceWorker worker(device, 1);
  worker.run([&] {
    auto parameter = torch::zeros({1 << 16}, torch::requires_grad());
    parameter.mutable_grad() = torch::ones_like(parameter);
    auto optimizer = optimizer_({parameter});
    const int64_t before = memory::stats(device).current_bytes;
    optimizer->step();
    optimizer->step();
    const double grown = static_cast<double>(memory::stats(device).current_bytes - before);
    state_slots_ = std::llround(grown / static_cast<double>(parameter.nbytes()));
  });
  save();
  return state_slots_;
}

void CostBook::save() const {
  if (cache_path_.empty()) return;
  auto cache_json = read_cache(cache_path_);
  nlohmann::json entries = {{"costs", nlohmann::json::array()}};
  if (state_slots_ >= 0) entries["state_slots"] = state_slots_;
  entries["calibration"] = costs::to_json(calibration_);
  entries["allreduce"] = allreduce_;
  for (const auto& [shape, costs] : costs_)
    entries["costs"].push_back(to_json(costs, shape.second));
  entries["fingerprint"] = entry_fingerprint(key_, entries);
  cache_json[key_] = entries;
  const auto parent = std::filesystem::path(cache_path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  write_json_file(cache_path_, cache_json, -1);
}

}  // namespace gpipe::plan
