// scaling_table: GPipe's Table 2 (speedup against K partitions and M micro-batches, normalised
// to naive-2) and Table 3 (M=32 without NVLink) with this engine, beside the paper's figures.
//
//   scaling_table --preset quick                      # two CPU cores, minutes
//   scaling_table --preset quick --models transformer-l --partitions 2,4 --chunks 1,8
//   scaling_table --preset paper --out results/scaling_table_paper   # hours, tens of GiB
//
// Why this program exists: it is what `experiments/scaling_table`, the command that regenerates
// Tables 2 and 3, runs (the shell wrapper beside this file builds it and runs it). Rows with K no
// larger than the devices present are measured (and projected, to check the projection); the
// others are projected from per-layer costs measured here (costs/projection.h). Writes
// PREFIX.md, PREFIX.csv and PREFIX.json.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/errors.h"
#include "tables/paper_figures.h"
#include "tables/scaling.h"

namespace {

using namespace gpipe;

constexpr const char* kAbout =
    "scaling_table: GPipe's Table 2 (throughput against K partitions and M micro-batches, "
    "normalised to naive-2: K=2, M=1) and Table 3 (M=32 over PCIe, normalised to K=2) for "
    "AmoebaNet-D and Transformer-L, ours beside the paper's.\n\n"
    "A row is 'measured' when K devices exist (K CPU cores for K virtual devices with one "
    "intra-op thread each, or K CUDA devices), else 'projected': per-layer forward, backward "
    "and optimizer times are measured on one device at the real micro-batch N/M, the layers "
    "are split by the exact min-max partitioner, and the simulator runs the GPipe schedule with "
    "re-materialisation and a link model between stages. Link presets (bandwidth per "
    "direction, latency per message): pcie 12 GB/s, 10 us (PCIe 3.0 x16, GPUs without "
    "NVLink); nvlink 50 GB/s, 5 us; tpu 70 GB/s, 2 us; none (shared memory); pcie-scaled and "
    "tpu-scaled: pcie or tpu with bandwidth times (and latency over) this machine's GEMM rate "
    "divided by a P100's or TPU v3 core's, so a copy costs the share of a step it costs there. "
    "Measured K rows are also projected on the link they ran with (none, or a scaled link the "
    "in-process transport imposes), and the projection check reports the difference.\n\n"
    "Run with OMP_WAIT_POLICY=PASSIVE (the wrapper experiments/scaling_table sets it).";

// The command line's values; -1, 0 and empty mean the preset's (see each flag's help).
struct Flags {
  std::string preset = "quick", models_text, partitions_text, chunks_text, tables_text = "2,3";
  std::string link, gpu_link, checkpoint_name = "always", optimizer = "auto";
  Precision precision = Precision::kFp32;
  std::string device_type = "cpu", out = "results/scaling_table", json_path, log_level = "info";
  std::string breakdown_out;
  int64_t batch = 0, max_measured_k = 0;
  int warmup = -1, steps = -1, profile_iterations = -1, check_rounds = 1;
  bool check_reprofile = false;
  bool calibrate = true;
  int calibration_rounds = 3;
  std::string calibration_chunks_text;
};

// What to make: the preset, its tables, models, K, M and N, and the tables' links (with
// --breakdown-out, Table 2's breakdown, between the two links where --help has always listed it).
void add_table_flags(CLI::App& app, Flags& flags) {
  app.add_option("--preset", flags.preset,
                 "quick: scaled-down models, two CPU cores, about 17 minutes; paper: AmoebaNet-D "
                 "(18, 256) and Transformer-48 (Table 3: (18, 128) and Transformer-24) at the "
                 "paper's dimensions (hours; Transformer measured rows need ~40 GiB)")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { tables::scaling_preset(name); }));
  app.add_option("--models", flags.models_text,
                 "comma list of amoebanet-d, transformer-l (default both)")
      ->check(cli::name_list([](const std::string& m) { tables::check_paper_model("", m); }));
  app.add_option("--tables", flags.tables_text, "which tables: 2, 3 or 2,3")
      ->capture_default_str()
      ->check(cli::name_list([](const std::string& t) {
        GPIPE_CHECK(t == "2" || t == "3", ConfigError, "'", t, "' is not 2 or 3");
      }));
  app.add_option("--partitions,-K", flags.partitions_text,
                 "K values of both tables (default 2,4,8)")
      ->check(cli::int_list(1, 4096));
  app.add_option("--chunks,-M", flags.chunks_text, "M values of Table 2 (default 1,4,32)")
      ->check(cli::int_list(1, 1 << 20));
  app.add_option("--batch,-N", flags.batch, "mini-batch N of every model (default: the preset's)")
      ->check(cli::int_range(int64_t{1}, int64_t{1} << 24));
  const auto link_name = cli::parsed_by([](const std::string& name) { link_preset(name); });
  app.add_option("--link", flags.link,
                 "Table 2's link for projected rows: tpu | nvlink | pcie | none | tpu-scaled | "
                 "pcie-scaled (default tpu, a TPU v3 interconnect; the paper says TPUs). A "
                 "-scaled link is slowed by this machine's compute rate over the accelerator's, "
                 "and measured CPU rows run under it")
      ->check(link_name);
  app.add_option("--breakdown-out", flags.breakdown_out,
                 "write Table 2's step breakdown (forward, backward, recompute, bubble, "
                 "imbalance, communication, optimizer) as BREAKDOWN.md, .csv and .json (default: "
                 "step_breakdown beside --out, e.g. results/step_breakdown)")
      ->check(cli::output_folder());
  app.add_option("--gpu-link", flags.gpu_link,
                 "Table 3's link (default pcie-scaled: PCIe between P100s without NVLink, scaled "
                 "by this machine's compute rate over a P100's 9.3 TFLOPS)")
      ->check(link_name);
}

// How to run: re-materialisation, optimizer, devices, measured steps, profiling and the checks.
void add_run_flags(CLI::App& app, Flags& flags) {
  app.add_option("--checkpoint", flags.checkpoint_name,
                 "re-materialisation: always | except_last | never")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { parse_checkpoint(name); }));
  cli::add_precision_flag(app, flags.precision,
                          "what the stages compute in: fp32 | bf16 | fp16 (profiles, calibrations "
                          "and measured rows alike; fp16 on CPU needs the LibTorch 2.x build)");
  app.add_option("--optimizer", flags.optimizer,
                 "rmsprop | adam | sgd | auto (RMSProp for AmoebaNet, Adam for the Transformer)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rmsprop", "adam", "sgd", "auto"}));
  app.add_option("--device-type", flags.device_type, "cpu (virtual devices) | cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--max-measured-k", flags.max_measured_k,
                 "measure rows with K up to this (0: as many devices as this machine has)")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, int64_t{4096}));
  app.add_option("--warmup", flags.warmup, "untimed steps before each measured run (default 1)")
      ->check(cli::int_range(0, 1000));
  app.add_option("--steps", flags.steps,
                 "timed steps of each measured run; the median counts (default 5)")
      ->check(cli::int_range(1, 1000));
  app.add_option("--profile-iterations", flags.profile_iterations,
                 "timed runs per layer when profiling; the median counts (default 5)")
      ->check(cli::int_range(1, 1000));
  app.add_option("--check-rounds", flags.check_rounds,
                 "rounds of each projection check, each a fresh calibration at the row's M right "
                 "before the measured run (on cpu also K one-device steps at once, for the "
                 "share of the step all K devices are busy); the medians are compared (this "
                 "machine's speed drifts within minutes)")
      ->capture_default_str()
      ->check(cli::int_range(1, 100));
  app.add_flag("--check-reprofile", flags.check_reprofile,
               "with --check-rounds above 1: also profile every layer afresh in each round "
               "(about three times the time)");
  app.add_flag("--calibrate,!--no-calibrate", flags.calibrate,
               "scale each model's projected compute costs by a real one-device step over its "
               "projection (default on, where the model fits this machine; the K=2 check then "
               "tests what the simulator adds for K stages)");
  app.add_option("--calibration-rounds", flags.calibration_rounds,
                 "measure each model's calibration this many times, interleaved with the other "
                 "models'; the median counts")
      ->capture_default_str()
      ->check(cli::int_range(1, 100));
  app.add_option("--calibration-chunks", flags.calibration_chunks_text,
                 "the Ms to calibrate each model at, each dividing every model's N; a row takes "
                 "the calibration of the nearest (default: each model's largest M)")
      ->check(cli::int_list(1, 1 << 20));
}

// Where the report goes, and how much is logged.
void add_output_flags(CLI::App& app, Flags& flags) {
  app.add_option("--out", flags.out,
                 "write OUT.md, OUT.csv and OUT.json (empty: print only; the PNG is "
                 "scripts/plot_scaling_table.py OUT.json)")
      ->capture_default_str()
      ->check(cli::output_folder(/*allow_empty=*/true));
  app.add_option("--json", flags.json_path, "also write the JSON to this path")
      ->check(cli::output_file());
  cli::add_log_level_flag(app, flags.log_level);
}

// The preset's `table` with the command line's models, K, M, link and N.
tables::ScalingTableSpec customise_table(const Flags& flags,
                                         const std::vector<std::string>& wanted_models,
                                         tables::ScalingTableSpec table) {
  if (!wanted_models.empty()) {
    std::vector<tables::ScalingModel> models;
    for (const auto& m : table.models) {
      if (std::find(wanted_models.begin(), wanted_models.end(), m.config.name()) !=
          wanted_models.end()) {
        models.push_back(m);
      }
    }
    table.models = models;
  }
  if (!flags.partitions_text.empty())
    table.partitions = cli::parse_ints(flags.partitions_text, "--partitions");
  if (!flags.chunks_text.empty() && table.id == "table2") {
    table.chunks = cli::parse_ints(flags.chunks_text, "--chunks");
  }
  if (table.id == "table2" && !flags.link.empty()) table.link = flags.link;
  if (table.id == "table3" && !flags.gpu_link.empty()) table.link = flags.gpu_link;
  if (flags.batch != 0) {
    for (auto& m : table.models)
      m.batch = flags.batch;
  }
  return table;
}

// The preset's tables that --tables keeps, each customised by the command line.
std::vector<tables::ScalingTableSpec> select_tables(
    const Flags& flags, const std::vector<tables::ScalingTableSpec>& preset_tables) {
  const auto wanted_tables = cli::parse_strings(flags.tables_text);
  const auto wanted_models = cli::parse_strings(flags.models_text);
  std::vector<tables::ScalingTableSpec> kept;
  for (const auto& table : preset_tables) {
    const std::string number = table.id.substr(5);
    if (std::find(wanted_tables.begin(), wanted_tables.end(), number) == wanted_tables.end()) {
      continue;
    }
    kept.push_back(customise_table(flags, wanted_models, table));
  }
  GPIPE_CHECK(!kept.empty(), ConfigError, "--tables ", flags.tables_text, " selects no table");
  return kept;
}

// The preset named by --preset with the command line's overrides.
tables::ScalingOptions scaling_options(const Flags& flags) {
  auto options = tables::scaling_preset(flags.preset);
  options.checkpoint = parse_checkpoint(flags.checkpoint_name);
  options.precision = flags.precision;
  check_precision_supported(options.precision, DeviceSpec::parse(flags.device_type + ":0"));
  options.optimizer = flags.optimizer;
  options.device_type = flags.device_type;
  options.max_measured_k = flags.max_measured_k;
  if (flags.warmup >= 0) options.warmup_steps = flags.warmup;
  if (flags.steps >= 0) options.timed_steps = flags.steps;
  options.check_rounds = flags.check_rounds;
  options.check_reprofile = flags.check_reprofile;
  options.calibrate = flags.calibrate;
  options.calibration_rounds = flags.calibration_rounds;
  if (!flags.calibration_chunks_text.empty())
    options.calibration_chunks =
        cli::parse_ints(flags.calibration_chunks_text, "--calibration-chunks");
  if (flags.profile_iterations >= 0) options.profile.iterations(flags.profile_iterations);
  options.tables = select_tables(flags, options.tables);
  return options;
}

// Writes OUT.md, .csv and .json (and --json), and Table 2's breakdown beside them.
void write_outputs(const tables::ScalingResult& result, const Flags& flags) {
  publish(result, flags.out, flags.json_path);
  std::string breakdown_out = flags.breakdown_out;
  if (breakdown_out.empty() && !flags.out.empty()) {
    breakdown_out = (std::filesystem::path(flags.out).parent_path() / "step_breakdown").string();
  }
  if (!result.breakdown.rows.empty() && !breakdown_out.empty()) {
    publish(result.breakdown, breakdown_out, "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpipe;
  CLI::App app{kAbout};
  Flags flags;
  add_table_flags(app, flags);
  add_run_flags(app, flags);
  add_output_flags(app, flags);

  return cli::run_main(app, argc, argv, [&] {
    spdlog::set_level(spdlog::level::from_str(flags.log_level));
    const auto options = scaling_options(flags);
    tables::validate(options);

    auto result = tables::run_scaling(options);
    result.command = cli::command_line(argc, argv);
    result.breakdown.command = result.command;
    write_outputs(result, flags);
    return cli::kExitOk;
  });
}
