#include "tables/scaling.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>

#include "common/report.h"
#include "costs/calibration.h"
#include "costs/measured_step.h"
#include "costs/projection.h"
#include "gpipe/errors.h"
#include "gpipe/simulator.h"
#include "gpipe/timing.h"
#include "tables/paper_figures.h"
#include "tables/table_link.h"
#include "tables/workload.h"

namespace gpipe::tables {
namespace {

std::string model_key(const ScalingModel& m) {
  return c10::str(models::to_json(m.config).dump(), "/N", m.batch);
}

std::vector<std::string> devices_for(const std::string& type, int64_t K) {
  std::vector<std::string> devices;
  for (int64_t i = 0; i < K; ++i)
    devices.push_back(c10::str(type, ":", i));
  return devices;
}

int64_t devices_present(const std::string& type) {
  if (type == "cuda") return static_cast<int64_t>(torch::cuda::device_count());
  return hardware_threads();
}

double elapsed_s(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// ---- presets, and the paper's figures they are compared with -------------------------------

namespace {

models::ModelConfig amoebanet(int64_t layers, int64_t filters, int64_t image_size,
                              int64_t classes) {
  models::ModelConfig c("amoebanet-d");
  c.amoebanet().layers(layers).filters(filters).image_size(image_size).channels(3).classes(classes);
  return c;
}

models::ModelConfig transformer(int64_t layers, int64_t d_model, int64_t ffn, int64_t heads,
                                int64_t vocab, int64_t seq_len) {
  models::ModelConfig c("transformer-l");
  c.transformer().layers(layers).d_model(d_model).ffn(ffn).heads(heads).vocab(vocab).seq_len(
      seq_len);
  return c;
}

}  // namespace

std::optional<double> paper_speedup(const std::string& table, const std::string& model, int64_t K,
                                    int64_t M) {
  if (table == "table3") return M == 32 ? paper_table3_speedup(model, K) : std::nullopt;
  return paper_table2_speedup(model, K, M);
}

const std::vector<std::string>& scaling_preset_names() {
  static const std::vector<std::string> names = {"quick", "paper"};
  return names;
}

ScalingOptions scaling_preset(const std::string& name) {
  ScalingOptions options;
  options.preset = name;
  ScalingTableSpec table2;
  table2.id = "table2";
  table2.title = "Table 2: normalised training throughput, K partitions and M micro-batches";
  table2.paper_hardware = paper_table2_hardware();
  table2.partitions = {2, 4, 8};
  table2.chunks = {1, 4, 32};
  table2.link = "tpu";
  table2.base_K = 2;
  table2.base_M = 1;
  ScalingTableSpec table3;
  table3.id = "table3";
  table3.title = "Table 3: normalised training throughput at M=32 without NVLink (PCIe link)";
  table3.paper_hardware = paper_table3_hardware();
  table3.partitions = {2, 4, 8};
  table3.chunks = {32};
  table3.link = "pcie-scaled";
  table3.base_K = 2;
  table3.base_M = 32;
  if (name == "quick") {
    // Scaled down to run on two CPU cores in minutes, and deep enough (32 and 34 layers) that
    // K=8 balances, as the paper's 18-cell AmoebaNet and 24-48 layer Transformers do; narrow, so
    // a step stays seconds, yet wide enough that a micro-batch of N/32 costs about what a large
    // one does per sample and a K=2 step what the one-thread profile predicts (the measurements
    // behind these sizes: results/README.md, "Tables 2 and 3").
    const ScalingModel amoeba{"AmoebaNet-D (L=26, D=16), 128x128 images",
                              amoebanet(26, 16, 128, 10), 256};
    const ScalingModel lm{"Transformer-L (L=32, d=256, ffn=1024, seq 64)",
                          transformer(32, 256, 1024, 4, 2048, 64), 64};
    table2.models = {amoeba, lm};
    table3.models = {amoeba, lm};
    // The paper's M = 1, 4, 32 and the M between, for the bubble against M (step_breakdown).
    table2.chunks = {1, 2, 4, 8, 16, 32};
  } else if (name == "paper") {
    table2.models = {{"AmoebaNet-D (18, 256), 224x224 images", amoebanet(18, 256, 224, 1000), 128},
                     {"Transformer-48 (d=2048, ffn=8192, 32 heads, seq 1024)",
                      transformer(48, 2048, 8192, 32, 32000, 1024), 32}};
    table3.models = {{"AmoebaNet-D (18, 128), 224x224 images", amoebanet(18, 128, 224, 1000), 128},
                     {"Transformer-24 (d=2048, ffn=8192, 32 heads, seq 1024)",
                      transformer(24, 2048, 8192, 32, 32000, 1024), 32}};
  } else {
    throw ConfigError(c10::str("unknown preset '", name, "': expected quick or paper"));
  }
  options.tables = {table2, table3};
  return options;
}

// ---- validation, normalisation ----------------------------------------------------------------

void validate(const ScalingOptions& options) {
  GPIPE_CHECK(!options.tables.empty(), ConfigError, "no tables to make");
  GPIPE_CHECK(options.device_type == "cpu" || options.device_type == "cuda", ConfigError,
              "unknown device type '", options.device_type, "': expected cpu or cuda");
  GPIPE_CHECK(options.max_measured_k >= 0, ConfigError,
              "--max-measured-k must be >= 0 (0: the devices present), got ",
              options.max_measured_k);
  GPIPE_CHECK(options.warmup_steps >= 0 && options.timed_steps >= 1, ConfigError,
              "--warmup must be >= 0 and --steps >= 1, got ", options.warmup_steps, " and ",
              options.timed_steps);
  GPIPE_CHECK(options.check_rounds >= 1, ConfigError, "--check-rounds must be >= 1, got ",
              options.check_rounds);
  GPIPE_CHECK(options.warmup_steps + options.timed_steps >= 2, ConfigError,
              "--warmup plus --steps must be at least 2 (the first step creates optimizer state)");
  GPIPE_CHECK(!options.calibrate || (options.calibration_steps >= 1 &&
                                     options.warmup_steps + options.calibration_steps >= 2),
              ConfigError, "calibration needs at least one timed step and two in all, got ",
              options.calibration_steps, " after ", options.warmup_steps, " warm-up step(s)");
  GPIPE_CHECK(options.calibration_rounds >= 1, ConfigError,
              "--calibration-rounds must be >= 1, got ", options.calibration_rounds);
  for (const auto& table : options.tables) {
    GPIPE_CHECK(!table.models.empty(), ConfigError, table.id, " has no models (check --models)");
    check_table_link(table.link);
    const auto has = [](const std::vector<int64_t>& values, int64_t v) {
      return std::find(values.begin(), values.end(), v) != values.end();
    };
    GPIPE_CHECK(!table.partitions.empty() && !table.chunks.empty(), ConfigError, table.id,
                " needs at least one K and one M");
    for (int64_t K : table.partitions) {
      GPIPE_CHECK(K >= 1, ConfigError, table.id, ": K=", K, " must be >= 1");
    }
    GPIPE_CHECK(has(table.partitions, table.base_K) && has(table.chunks, table.base_M), ConfigError,
                table.id, " normalises to K=", table.base_K, ", M=", table.base_M,
                ", so its K list must include ", table.base_K, " and its M list ", table.base_M);
    for (const auto& model : table.models) {
      GPIPE_CHECK(model.batch >= 1, ConfigError, model.label, ": the mini-batch N must be >= 1");
      const int64_t layers = models::make_model(model.config)->num_layers();
      for (int64_t K : table.partitions) {
        GPIPE_CHECK(K <= layers, ConfigError, table.id, ": K=", K, " is larger than the ", layers,
                    " layers of ", model.label, "; a stage needs at least one layer, so use ",
                    "K <= ", layers, " or a deeper model");
      }
      for (int64_t M : table.chunks) {
        GPIPE_CHECK(M >= 1 && M <= model.batch && model.batch % M == 0, ConfigError, table.id,
                    ": M=", M, " must divide the mini-batch N=", model.batch, " of ", model.label,
                    " (equal micro-batches of N/M samples)");
      }
      for (const int64_t c :
           options.calibrate ? options.calibration_chunks : std::vector<int64_t>{}) {
        GPIPE_CHECK(c >= 1 && c <= model.batch && model.batch % c == 0, ConfigError,
                    "--calibration-chunks ", c, " must divide the mini-batch N=", model.batch,
                    " of ", model.label, "; use divisors of N, or leave it out for its largest M");
      }
    }
  }
}

void normalise(std::vector<ScalingRow>& rows, const std::string& table, int64_t base_K,
               int64_t base_M) {
  std::map<std::pair<std::string, std::string>, double> baseline;
  std::set<std::string> models;
  for (const auto& row : rows) {
    if (row.table != table) continue;
    models.insert(row.model);
    if (row.K == base_K && row.M == base_M) baseline[{row.model, row.source}] = row.samples_per_s;
  }
  for (const auto& model : models) {
    bool any = false;
    for (const auto& [key, value] : baseline)
      any = any || (key.first == model && value > 0);
    GPIPE_CHECK(any, ConfigError, table, ": ", model, " has no row at the baseline K=", base_K,
                ", M=", base_M, " to normalise by");
  }
  for (auto& row : rows) {
    if (row.table != table) continue;
    const auto it = baseline.find({row.model, row.source});
    if (it == baseline.end() || it->second <= 0) {
      row.speedup.reset();
    } else {
      row.speedup = row.samples_per_s / it->second;
    }
  }
}

namespace {

// Warns that `what` ran beside other work: its timing is not this machine's own.
void warn_if_busy(const std::string& what, double other_cores) {
  if (other_cores > 0.25) {
    spdlog::warn(
        "{}: other processes kept {:.2f} cores busy meanwhile; its timing is slower "
        "than this machine can do",
        what, other_cores);
  }
}

// Per model and micro-batch: the layer costs as profiled, and who else used the CPU meanwhile.
struct RawProfile {
  costs::LayerCosts costs;
  double other_cores = 0;
};

// The same costs scaled by the model's calibration (1: none).
struct Profiled {
  costs::LayerCosts costs;
  double other_cores = 0;
  double calibration = 1;
};

// Each check round of a measured run: its projected and measured samples/s and calibration.
using CheckRounds = std::vector<std::tuple<double, double, double>>;

// What every row of run_scaling shares: the options, the result it fills, where the layers are
// profiled, and the caches that keep one profile per model and micro-batch and one measurement
// per run (a run that several tables ask for is measured once).
struct ScalingRun {
  ScalingRun(const ScalingOptions& options_in, ScalingResult& result_in)
      : options(options_in),
        result(result_in),
        profile_device(DeviceSpec::parse(options_in.device_type + ":0")),
        memory(physical_memory_bytes()) {}

  const ScalingOptions& options;
  ScalingResult& result;
  const DeviceSpec profile_device;
  const int64_t memory;                         // physical memory, 0 if unknown
  std::map<std::string, RawProfile> raw_cache;  // by model and micro-batch
  std::map<std::string, Profiled> costs_cache;  // the same, calibrated
  costs::Calibrations calibrations;             // by calibration_label
  // model_key -> its calibrations' labels by M
  std::map<std::string, std::map<int64_t, std::string>> calibration_of;
  std::map<std::string, costs::TrainingMeasurement> measured_cache;
  std::set<std::string> checked;
  std::map<std::string, CheckRounds> check_rounds;  // per measured run
};

// One model of one table, built once for all its rows.
struct ModelRun {
  const ScalingTableSpec& table;
  const TableLink& link;  // the table's
  const ScalingModel& model;
  const std::unique_ptr<models::ModelBuilder> builder;
  const std::string optimizer;
  const bool can_measure;  // its state fits this machine's memory
  const models::SampleBatch full_batch;
};

// Resolves how many devices the measured rows may use and records the machine the tables run
// on, warning when other work already loads it.
void describe_machine(const ScalingOptions& options, ScalingResult& result) {
  const int64_t present = devices_present(options.device_type);
  result.max_measured_k = options.max_measured_k > 0 ? options.max_measured_k : present;
  GPIPE_CHECK(result.max_measured_k <= present, ConfigError, "--max-measured-k ",
              result.max_measured_k, " is more than the ", present, " ", options.device_type,
              " devices this machine has");
  result.machine = {{"hardware_threads", hardware_threads()},
                    {"device_type", options.device_type},
                    {"devices_present", present},
                    {"physical_memory_bytes", physical_memory_bytes()},
                    {"load_average_before", load_average()},
                    {"environment", arithmetic_environment()}};
  const auto& load = result.machine["load_average_before"];
  if (load.is_array() && load[0].get<double>() > 0.5) {
    spdlog::warn(
        "the load average is {:.2f}: other work shares these cores, so steps measured on "
        "several devices at once run slower than this machine can (the one-thread "
        "profiles behind the projections suffer less); rerun on an idle machine",
        load[0].get<double>());
  }
}

// Each table's link model. A scaled link needs this machine's GEMM rate, measured once on the
// profile device when the first table asks for it.
void resolve_links(ScalingRun& run) {
  const auto& options = run.options;
  auto& result = run.result;
  double machine_flops = 0;
  for (const auto& table : options.tables) {
    if (is_scaled_link(table.link) && machine_flops == 0) {
      machine_flops = measure_gemm_flops(run.profile_device, options.profile.threads());
      result.machine["gemm_flops"] = machine_flops;
      result.machine["gemm_threads"] = options.profile.threads();
    }
    const auto link = table_link(table.link, machine_flops);
    result.links[table.id] = link;
    if (link.scaled()) {
      spdlog::info(
          "{} link {}: {} does {:.1f} GFLOP/s ({} thread(s) on a CPU), {:.3g} of a {}, so the "
          "link gets {:.3g} MB/s and {:.3g} ms a message",
          table.id, link.name, run.profile_device.str(), machine_flops / 1e9,
          options.profile.threads(), link.factor, link.accelerator, link.link.bandwidth / 1e6,
          link.link.latency * 1e3);
    }
  }
}

// Builds `model` of `table` and decides whether its rows can be measured here.
std::unique_ptr<ModelRun> prepare_model(const ScalingRun& run, const ScalingTableSpec& table,
                                        const ScalingModel& model) {
  auto builder = models::make_model(model.config);
  const std::string optimizer = resolve_optimizer(run.options.optimizer, model.config.name());
  const int64_t parameters = builder->count_parameters();
  // Parameters, gradients and optimizer state of the whole model, for the measured runs.
  const int64_t state_bytes = parameters * bytes_per_parameter(optimizer);
  const bool can_measure = run.memory == 0 || state_bytes < run.memory * 6 / 10;
  if (!can_measure) {
    spdlog::warn(
        "{}: {} of parameters, gradients and {} state is more than this machine's "
        "memory allows ({}); its rows are projected only",
        model.label, format_bytes(static_cast<double>(state_bytes)), optimizer,
        format_bytes(static_cast<double>(run.memory)));
  }
  auto full_batch = builder->sample_batch(model.batch, /*seed=*/1);
  const auto& link = run.result.links.at(table.id);
  return std::unique_ptr<ModelRun>(new ModelRun{table, link, model, std::move(builder), optimizer,
                                                can_measure, std::move(full_batch)});
}

// Profiles every layer at this micro-batch, logged with who else used the CPU.
RawProfile profile_layers(const ScalingRun& run, const ModelRun& mr, int64_t M) {
  const auto& options = run.options;
  const auto& model = mr.model;
  const auto& builder = mr.builder;
  const int64_t micro = model.batch / M;
  const auto t0 = std::chrono::steady_clock::now();
  spdlog::info("{}: profiling {} layers at micro-batch {} (M={})", model.label,
               builder->num_layers(), micro, M);
  const auto layers = builder->build();
  const costs::CpuMeter cpu;
  auto c = costs::measure_layer_costs(
      layers, builder->sample_batch(micro, /*seed=*/2), builder->loss(), run.profile_device,
      make_optimizer(mr.optimizer), ProfileOptions(options.profile).precision(options.precision));
  double forward = c.loss_forward_ms, backward = c.loss_backward_ms, update = 0;
  for (int64_t i = 0; i < c.num_layers(); ++i) {
    forward += c.forward_ms[i];
    backward += c.backward_ms[i];
    update += c.update_ms[i];
  }
  spdlog::info(
      "{}: micro-batch {}: forward {:.1f} ms, backward {:.1f} ms ({:.2f} ms "
      "per sample), update {:.1f} ms; profiled in {:.1f} s",
      model.label, micro, forward, backward, (forward + backward) / static_cast<double>(micro),
      update, elapsed_s(t0));
  const double other_cores = cpu.read().other_cores;
  warn_if_busy(c10::str(model.label, " profile at micro-batch ", micro), other_cores);
  return RawProfile{std::move(c), other_cores};
}

// The caches' key of `mr`'s layer costs at M: the model and its micro-batch.
std::string costs_key(const ModelRun& mr, int64_t M) {
  return c10::str(model_key(mr.model), "/b", mr.model.batch / M);
}

// The calibration step of `model` at M: one device, the model's N in M micro-batches, the
// profiles' threads and the table's re-materialisation.
costs::CalibrationKey one_device_key(const ScalingOptions& options, const ScalingModel& model,
                                     int64_t M) {
  costs::CalibrationKey key;
  key.M = M;
  key.microbatch = model.batch / M;
  key.threads = options.profile.threads();
  key.checkpoint = options.checkpoint;
  return key;
}

// The layer costs of `mr` at M as profiled, the first time anyone asks for them.
const RawProfile& raw_at(ScalingRun& run, const ModelRun& mr, int64_t M) {
  const auto key = costs_key(mr, M);
  if (!run.raw_cache.count(key)) run.raw_cache[key] = profile_layers(run, mr, M);
  return run.raw_cache.at(key);
}

// `raw` scaled by the calibration `ratio`.
Profiled with_calibration(const RawProfile& raw, double ratio) {
  return Profiled{costs::scaled_compute(raw.costs, ratio), raw.other_cores, ratio};
}

// `raw` (profiled at M) scaled by its model's calibration at the M nearest to it by ratio (a tie
// takes the larger M), where the model has one.
Profiled calibrated(const ScalingRun& run, const ModelRun& mr, const RawProfile& raw, int64_t M) {
  const auto found = run.calibration_of.find(model_key(mr.model));
  if (found == run.calibration_of.end()) return with_calibration(raw, 1.0);
  const std::string* nearest = nullptr;
  double best = 0;
  for (const auto& [at, label] : found->second) {  // ascending M: a tie keeps the later one
    const double distance = std::abs(std::log(static_cast<double>(at) / static_cast<double>(M)));
    if (nearest == nullptr || distance <= best) {
      nearest = &label;
      best = distance;
    }
  }
  return with_calibration(raw, run.calibrations.median(*nearest));
}

// The calibrated layer costs of `mr` at M.
const Profiled& profiled_at(ScalingRun& run, const ModelRun& mr, int64_t M) {
  const auto key = costs_key(mr, M);
  if (!run.costs_cache.count(key))
    run.costs_cache[key] = calibrated(run, mr, raw_at(run, mr, M), M);
  return run.costs_cache.at(key);
}

// The Ms a model is calibrated at: --calibration-chunks, or the largest M of its rows in any
// table (its smallest micro-batch: where isolated layer timings miss the most).
std::vector<int64_t> calibration_chunks(const ScalingOptions& options, const ScalingModel& model) {
  if (!options.calibration_chunks.empty()) return options.calibration_chunks;
  int64_t M = 1;
  for (const auto& table : options.tables) {
    for (const auto& m : table.models) {
      if (model_key(m) != model_key(model)) continue;
      M = std::max(M, *std::max_element(table.chunks.begin(), table.chunks.end()));
    }
  }
  return {M};
}

// One round of the calibration `key` of `mr` (layer costs `raw` at key.M): a one-device step
// over its projection.
double calibration_round(const ScalingRun& run, const ModelRun& mr,
                         const costs::CalibrationKey& key, const costs::LayerCosts& raw) {
  const auto& options = run.options;
  const auto t0 = std::chrono::steady_clock::now();
  const auto step = costs::measure_calibration(*mr.builder, raw, key, make_optimizer(mr.optimizer),
                                               costs::CalibrationOptions()
                                                   .devices({options.device_type + ":0"})
                                                   .warmup(options.warmup_steps)
                                                   .steps(options.calibration_steps)
                                                   .precision(options.precision));
  spdlog::info(
      "{}: a one-device step of M={} took {:.1f} ms, its projection {:.1f} ms: {:.3f} "
      "({:.1f} s)",
      mr.model.label, key.M, step.measured_ms, step.projected_ms, step.ratio(), elapsed_s(t0));
  return step.ratio();
}

// Calibrates every model that fits this machine at its calibration Ms, in rounds interleaved
// over the models and Ms (ScalingOptions::calibration_rounds), before any row: each M of a model
// then takes the median of the nearest calibration.
void calibrate_models(ScalingRun& run, const std::vector<std::unique_ptr<ModelRun>>& model_runs) {
  const auto& options = run.options;
  if (!options.calibrate) return;
  std::vector<std::string> labels;
  std::map<std::string, std::pair<const ModelRun*, costs::CalibrationKey>> jobs;
  for (const auto& mr : model_runs) {
    if (!mr->can_measure || run.calibration_of.count(model_key(mr->model))) continue;
    for (const int64_t M : calibration_chunks(options, mr->model)) {
      const auto key = one_device_key(options, mr->model, M);
      const auto label = c10::str(mr->model.label, " ", key.name());
      run.calibration_of[model_key(mr->model)][M] = label;
      labels.push_back(label);
      jobs.emplace(label, std::make_pair(mr.get(), key));
      raw_at(run, *mr, M);  // profiled first: the rounds interleave only the steps
    }
  }
  run.calibrations.measure_in_rounds(
      labels, options.calibration_rounds, 0, 0.0, [&](const std::string& label) {
        const auto& [model_run, key] = jobs.at(label);
        return calibration_round(run, *model_run, key, raw_at(run, *model_run, key.M).costs);
      });
  for (const auto& label : labels) {
    const auto& [mr, key] = jobs.at(label);
    const double median = run.calibrations.median(label);
    spdlog::info("{}: calibration at M={} {:.3f}, the median of {} round(s) spread {:.1f}%",
                 mr->model.label, key.M, median, run.calibrations.rounds(label).size(),
                 100 * run.calibrations.spread(label));
    run.result.calibrations.push_back({mr->model.config.name(), mr->model.label, key.M, key.name(),
                                       run.calibrations.rounds(label), median});
  }
}

// The projected row at K and M: the simulated step on the table's link, its bubble and the
// share the link adds; Table 2 also gets the row's simulated breakdown.
ScalingRow projected_row(ScalingRun& run, const ModelRun& mr, const Profiled& profiled, int64_t K,
                         int64_t M) {
  const auto& options = run.options;
  const auto& costs = profiled.costs;
  const auto& link = mr.link;
  const auto balance = costs::balance_by_time(costs, K);
  const auto projection = costs::project_step(costs, K, M, options.checkpoint, link.link, balance);
  const auto unlinked =
      costs::project_step(costs, K, M, options.checkpoint, link_preset("none"), balance);
  ScalingRow row;
  row.table = mr.table.id;
  row.model = mr.model.config.name();
  row.label = mr.model.label;
  row.K = K;
  row.M = M;
  row.batch = mr.model.batch;
  row.source = "projected";
  row.link = mr.table.link;
  row.step_ms = projection.step_ms;
  row.samples_per_s = costs::samples_per_second(mr.model.batch, projection.step_ms);
  row.bubble_fraction = projection.bubble_fraction;
  row.comm_fraction = 1.0 - unlinked.step_ms / projection.step_ms;
  if (mr.table.id == "table2") {
    auto b = simulated_breakdown(costs, K, M, options.checkpoint, link.link, balance);
    b.model = row.model;
    run.result.breakdown.rows.push_back(b);
  }
  row.balance = balance;
  row.other_cores = profiled.other_cores;
  row.calibration = profiled.calibration;
  row.paper_speedup = paper_speedup(mr.table.id, row.model, K, M);
  return row;
}

// The link a measured run has. Under a scaled link a run on CPU virtual devices imposes it
// (they otherwise share memory); real devices have their own link.
struct MeasuredLink {
  bool impose = false;
  std::string name;  // the scaled link's name, "none" (CPU virtual devices) or "device"
  LinkModel local;   // what its projection assumes: the imposed link, or none
};

MeasuredLink measured_link_for(const ScalingOptions& options, const TableLink& link) {
  MeasuredLink out;
  out.impose = link.scaled() && options.device_type == "cpu";
  out.name = out.impose ? link.name : options.device_type == "cpu" ? "none" : "device";
  out.local = out.impose ? link.link : link_preset("none");
  return out;
}

// One measured run of `row`'s K, M and balance on K devices (round r of the check rounds).
costs::TrainingMeasurement measure_once(const ScalingRun& run, const ModelRun& mr,
                                        const ScalingRow& row, const MeasuredLink& measured_link,
                                        int r) {
  const auto& options = run.options;
  const auto& model = mr.model;
  const int64_t K = row.K, M = row.M;
  const auto t0 = std::chrono::steady_clock::now();
  spdlog::info(
      "{}: measuring K={} M={} (balance {}) on {} {} devices, link {}{}", model.label, K, M,
      c10::Join(",", row.balance), K, options.device_type, measured_link.name,
      options.check_rounds > 1 ? c10::str(", round ", r + 1, " of ", options.check_rounds) : "");
  PipelineShape shape;
  shape.balance = row.balance;
  shape.devices = devices_for(options.device_type, K);
  shape.M = M;
  shape.checkpoint = options.checkpoint;
  shape.threads = 1;
  shape.precision = options.precision;
  auto m = costs::measure_training(*mr.builder, mr.full_batch, shape, make_optimizer(mr.optimizer),
                                   options.warmup_steps, options.timed_steps, /*seed=*/1,
                                   measured_link.impose ? mr.link.link : LinkModel{});
  spdlog::info(
      "{}: K={} M={}: {:.1f} ms per step, {:.2f} cores busy (measured in {:.1f} "
      "s)",
      model.label, K, M, m.median_step_ms, m.cpu.own_cores, elapsed_s(t0));
  warn_if_busy(c10::str(model.label, " K=", K, " M=", M), m.cpu.other_cores);
  return m;
}

// One check round's costs at M: a fresh profile, calibrated right after it by one measurement at
// M where the table calibrates (the round's profile, calibration and measured run then share
// that minute's machine).
Profiled paired_profile(ScalingRun& run, const ModelRun& mr, int64_t M) {
  auto raw = profile_layers(run, mr, M);
  if (!run.options.calibrate || !mr.can_measure) return with_calibration(raw, 1.0);
  return with_calibration(
      raw, calibration_round(run, mr, one_device_key(run.options, mr.model, M), raw.costs));
}

// Measures `row`'s run for every check round, keeping round 0's measurement under `run_key`
// and every round's projected and measured samples/s. With check rounds, each round profiles
// (and calibrates) afresh right before its measurement.
void measure_rounds(ScalingRun& run, const ModelRun& mr, const Profiled& profiled,
                    const ScalingRow& row, const MeasuredLink& measured_link,
                    const std::string& run_key) {
  const auto& options = run.options;
  auto& rounds = run.check_rounds[run_key];
  for (int r = 0; r < options.check_rounds; ++r) {
    const auto fresh = options.check_rounds > 1 ? paired_profile(run, mr, row.M) : profiled;
    auto m = measure_once(run, mr, row, measured_link, r);
    const auto projected = costs::project_step(fresh.costs, row.K, row.M, options.checkpoint,
                                               measured_link.local, row.balance);
    rounds.push_back({costs::samples_per_second(mr.model.batch, projected.step_ms),
                      costs::samples_per_second(mr.model.batch, m.median_step_ms),
                      fresh.calibration});
    if (r == 0) run.measured_cache[run_key] = std::move(m);
  }
}

// The projection check of a measured run against its projected twin `row`: the medians over
// the rounds, each round's error and calibration. The projection is on the link the run had:
// the scaled one, or none (CPU virtual devices share memory).
ProjectionCheck projection_check(const ScalingRow& row, const ScalingRow& mrow,
                                 const CheckRounds& rounds) {
  ProjectionCheck check;
  check.model = row.model;
  check.label = row.label;
  check.K = row.K;
  check.M = row.M;
  check.link = mrow.link;
  std::vector<double> projected, measured_rate;
  for (const auto& [p, m, calibration] : rounds) {
    projected.push_back(p);
    measured_rate.push_back(m);
    check.round_errors.push_back(p / m - 1.0);
    check.round_calibrations.push_back(calibration);
  }
  check.measured_samples_per_s = median(measured_rate);
  check.projected_samples_per_s = median(projected);
  check.other_cores_measured = mrow.other_cores;
  check.other_cores_profiled = row.other_cores;
  return check;
}

// The measured twin of the projected `row` (measured once per run, whichever tables ask), its
// measured breakdown for Table 2 and, the first time the run is seen, its projection check.
void add_measured_row(ScalingRun& run, const ModelRun& mr, const Profiled& profiled,
                      const ScalingRow& row) {
  const auto& options = run.options;
  const auto measured_link = measured_link_for(options, mr.link);
  const std::string run_key =
      c10::str(model_key(mr.model), "/K", row.K, "/M", row.M, "/", measured_link.name);
  if (!run.measured_cache.count(run_key)) {
    measure_rounds(run, mr, profiled, row, measured_link, run_key);
  }
  const auto& measured = run.measured_cache.at(run_key);
  ScalingRow mrow = row;
  mrow.source = "measured";
  mrow.link = measured_link.name;
  mrow.step_ms = measured.median_step_ms;
  mrow.samples_per_s = costs::samples_per_second(mr.model.batch, measured.median_step_ms);
  mrow.bubble_fraction.reset();
  mrow.other_cores = measured.cpu.other_cores;
  run.result.rows.push_back(mrow);
  if (mr.table.id == "table2") {
    auto b = simulated_breakdown(profiled.costs, row.K, row.M, options.checkpoint,
                                 measured_link.local, row.balance);
    b.model = row.model;
    run.result.breakdown.rows.push_back(
        measured_breakdown(measured.last_step_events, measured.step_ms.back(), b));
  }
  if (run.checked.insert(run_key).second) {
    run.result.checks.push_back(projection_check(row, mrow, run.check_rounds.at(run_key)));
  }
}

// Every row of one model of one table: for each M its profile, for each K the projected row
// and, where K devices exist and the model fits, the measured one.
void add_model_rows(ScalingRun& run, const ModelRun& mr) {
  for (int64_t M : mr.table.chunks) {
    const auto& profiled = profiled_at(run, mr, M);
    for (int64_t K : mr.table.partitions) {
      const auto row = projected_row(run, mr, profiled, K, M);
      run.result.rows.push_back(row);
      if (K > run.result.max_measured_k || !mr.can_measure) continue;
      add_measured_row(run, mr, profiled, row);
    }
  }
}

// Table 2's breakdown report: the run's metadata, and each breakdown row's speedup from its
// table row (simulated rows take the projected row's, measured rows the measured one's).
void finish_breakdown(const ScalingOptions& options, ScalingResult& result) {
  result.breakdown.preset = options.preset;
  result.breakdown.checkpoint = to_string(options.checkpoint);
  result.breakdown.machine = result.machine;
  result.breakdown.seconds = result.seconds;
  for (const auto& table : options.tables) {
    if (table.id == "table2") result.breakdown.link = table.link;
  }
  for (auto& b : result.breakdown.rows) {
    const std::string source = b.source == "simulated" ? "projected" : "measured";
    for (const auto& r : result.rows) {
      if (r.table == "table2" && r.model == b.model && r.K == b.K && r.M == b.M &&
          r.source == source) {
        b.speedup = r.speedup;
      }
    }
  }
}

}  // namespace

ScalingResult run_scaling(const ScalingOptions& options) {
  validate(options);
  const auto started = std::chrono::steady_clock::now();
  ScalingResult result;
  result.options = options;
  describe_machine(options, result);
  ScalingRun run(options, result);
  resolve_links(run);
  std::vector<std::unique_ptr<ModelRun>> model_runs;
  for (const auto& table : options.tables) {
    for (const auto& model : table.models)
      model_runs.push_back(prepare_model(run, table, model));
  }
  calibrate_models(run, model_runs);
  for (const auto& mr : model_runs)
    add_model_rows(run, *mr);
  for (const auto& table : options.tables)
    normalise(result.rows, table.id, table.base_K, table.base_M);
  result.machine["load_average_after"] = load_average();
  result.seconds = elapsed_s(started);
  finish_breakdown(options, result);
  return result;
}

}  // namespace gpipe::tables
