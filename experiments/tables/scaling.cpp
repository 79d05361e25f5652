#include "tables/scaling.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "common/report.h"
#include "gpipe/errors.h"
#include "gpipe/timing.h"
#include "tables/paper_figures.h"
#include "tables/scaling_run.h"
#include "tables/table_link.h"
#include "tables/workload.h"

namespace gpipe::tables {

using scaling::elapsed_s;
using scaling::ModelRun;
using scaling::ScalingRun;

namespace {

int64_t devices_present(const std::string& type) {
  if (type == "cuda") return static_cast<int64_t>(torch::cuda::device_count());
  return hardware_threads();
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

// Every row of one model of one table: for each M its profile, for each K the projected row
// and, where K devices exist and the model fits, the measured one.
void add_model_rows(ScalingRun& run, const ModelRun& mr) {
  for (int64_t M : mr.table.chunks) {
    const auto& profiled = scaling::profiled_at(run, mr, M);
    for (int64_t K : mr.table.partitions) {
      const auto row = scaling::projected_row(run, mr, profiled, K, M);
      run.result.rows.push_back(row);
      if (K > run.result.max_measured_k || !mr.can_measure) continue;
      scaling::add_measured_row(run, mr, profiled, row);
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
  scaling::calibrate_models(run, model_runs);
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
