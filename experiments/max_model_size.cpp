// max_model_size: GPipe's Table 1 with this engine - the largest AmoebaNet-D (L, D) and
// Transformer-L that naive-1 and pipeline-1/2/4/8 train within a per-device memory budget,
// beside the paper's figures.
//
//   max_model_size --preset quick                          # 2 CPU cores, small budget, minutes
//   max_model_size --preset quick --models transformer-l --configs naive-1,pipeline-1
//   max_model_size --preset paper                          # 8 GiB per device: needs 64+ GiB
//
// Why this program exists: it is what `experiments/max_model_size`, the command that regenerates
// Table 1, runs (the shell wrapper beside this file builds it and runs it). A calibrated memory
// model proposes sizes; every reported row is a size whose real training step
// (costs/measured_step.h) the memory meter measured within the budget on every device. Writes
// PREFIX.md, PREFIX.csv and PREFIX.json.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/errors.h"
#include "tables/max_size.h"
#include "tables/paper_figures.h"

namespace gpipe {
namespace {

// The command line as given: an empty text or a zero count keeps the preset's value.
struct TableFlags {
  std::string preset = "quick", budget_text, models_text, configs_text, amoeba_layers,
              amoeba_filters, transformer_layers, checkpoint_name = "always", optimizer,
              precisions = "fp32";
  std::string out = "results/max_model_size", json_path, log_level = "info";
  int64_t chunks = 0, batch = 0, fixed_layers = -1;
  int max_measurements = 0, threads = 0;
};

// Declares the flags; their checks reject a bad value before anything runs.
void add_flags(CLI::App& app, TableFlags& f) {
  app.add_option("--preset", f.preset,
                 "quick: 64x64 AmoebaNet and a small Transformer-L, 96 MiB per device, under 20 "
                 "minutes on 2 cores; paper: the paper's sizes, 8 GiB per device for AmoebaNet-D "
                 "and 16 GiB for "
                 "Transformer-L (needs 8 x 16 GiB of memory)")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { tables::max_size_preset(name); }));
  app.add_option(
         "--memory-budget", f.budget_text,
         "bytes per device for every model, e.g. 8GiB, 96MiB (default: the preset's; paper: "
         "8GiB for AmoebaNet-D, 16GiB for Transformer-L, as the paper)")
      ->check(cli::parsed_by([](const std::string& text) { parse_bytes(text, ""); }));
  app.add_option("--models", f.models_text,
                 "comma list of amoebanet-d, transformer-l (default both)")
      ->check(cli::name_list([](const std::string& m) { tables::check_paper_model("", m); }));
  app.add_option("--configs", f.configs_text,
                 "comma list of naive-1, pipeline-K (default naive-1,pipeline-1,pipeline-2,"
                 "pipeline-4,pipeline-8)")
      ->check(cli::name_list([](const std::string& c) { tables::parse_size_config(c); }));
  app.add_option("--chunks,-M", f.chunks,
                 "micro-batches of the pipeline-K configurations (default 8)")
      ->check(cli::int_range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--batch,-N", f.batch, "mini-batch of every model (default: the preset's)")
      ->check(cli::int_range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--amoebanet-layers", f.amoeba_layers,
                 "AmoebaNet-D L values to search, e.g. 6,12,18")
      ->check(cli::int_list(1, 4096));
  app.add_option("--amoebanet-filters", f.amoeba_filters,
                 "AmoebaNet-D D values to search (multiples of 16), ascending")
      ->check(cli::int_list(1, 1 << 16));
  app.add_option("--amoebanet-fixed-layers", f.fixed_layers,
                 "AmoebaNet-D L of naive-1, pipeline-1 and pipeline-2, which grow D only as the "
                 "paper's Table 1 (default: the preset's, quick 6, paper 18; 0: search every L)")
      ->check(cli::int_range(int64_t{0}, int64_t{4096}));
  app.add_option("--transformer-layers", f.transformer_layers,
                 "Transformer-L L values to search, ascending")
      ->check(cli::int_list(1, 4096));
  app.add_option("--checkpoint", f.checkpoint_name,
                 "re-materialisation of pipeline-K: always | except_last | never")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { parse_checkpoint(name); }));
  app.add_option(
         "--optimizer", f.optimizer,
         "rmsprop (the default: the paper's Table 1 counts 12 bytes a parameter for every row) | "
         "adam | sgd | auto (RMSProp for AmoebaNet, Adam for the Transformer)")
      ->check(CLI::IsMember({"rmsprop", "adam", "sgd", "auto"}));
  app.add_option("--precision", f.precisions,
                 "comma list of fp32, bf16, fp16: search every row in each (fp32 is the paper's; "
                 "fp16 on CPU needs the LibTorch 2.x build)")
      ->capture_default_str()
      ->check(cli::name_list([](const std::string& p) { parse_precision(p); }));
  app.add_option("--max-measurements", f.max_measurements,
                 "measured steps per model and configuration (default 6)")
      ->check(cli::int_range(1, 1000));
  app.add_option("--threads", f.threads,
                 "intra-op threads of profiles and one-device steps (default: all)")
      ->check(cli::int_range(0, 4096));
  app.add_option("--out", f.out,
                 "write OUT.md, OUT.csv and OUT.json (empty: print only; the PNG is "
                 "scripts/plot_max_model_size.py OUT.json)")
      ->capture_default_str()
      ->check(cli::output_folder(/*allow_empty=*/true));
  app.add_option("--json", f.json_path, "also write the JSON to this path")
      ->check(cli::output_file());
  cli::add_log_level_flag(app, f.log_level);
}

// The preset's models that --models names (all without it), with the batch and the sizes to
// search that the flags give.
std::vector<tables::MaxSizeModel> selected_models(const TableFlags& f,
                                                  const std::vector<tables::MaxSizeModel>& all) {
  const auto wanted = cli::parse_strings(f.models_text);
  std::vector<tables::MaxSizeModel> models;
  for (auto model : all) {
    if (!wanted.empty() &&
        std::find(wanted.begin(), wanted.end(), model.base.name()) == wanted.end()) {
      continue;
    }
    if (f.batch != 0) model.batch = f.batch;
    if (tables::is_amoebanet(model.base.name())) {
      if (!f.amoeba_layers.empty())
        model.layers = cli::parse_ints(f.amoeba_layers, "--amoebanet-layers");
      if (f.fixed_layers >= 0) model.fixed_layers = f.fixed_layers;
      if (!f.amoeba_filters.empty()) {
        model.filters = cli::parse_ints(f.amoeba_filters, "--amoebanet-filters");
      }
    } else if (!f.transformer_layers.empty()) {
      model.layers = cli::parse_ints(f.transformer_layers, "--transformer-layers");
    }
    models.push_back(model);
  }
  return models;
}

// The preset's search with the flags' overrides.
tables::MaxSizeOptions search_options(const TableFlags& f) {
  auto options = tables::max_size_preset(f.preset);
  if (!f.budget_text.empty()) {
    options.budget_bytes = parse_bytes(f.budget_text, "--memory-budget");
    for (auto& model : options.models)
      model.budget_bytes = 0;
  }
  if (!f.configs_text.empty()) options.configs = cli::parse_strings(f.configs_text);
  for (const auto& name : options.configs)
    tables::parse_size_config(name);
  if (f.chunks != 0) options.chunks = f.chunks;
  options.checkpoint = parse_checkpoint(f.checkpoint_name);
  if (!f.optimizer.empty()) options.optimizer = f.optimizer;
  if (f.max_measurements != 0) options.max_measurements = f.max_measurements;
  options.threads = f.threads;
  options.precisions.clear();
  for (const auto& name : cli::parse_strings(f.precisions)) {
    options.precisions.push_back(parse_precision(name));
    check_precision_supported(options.precisions.back(), DeviceSpec::parse("cpu:0"));
  }
  GPIPE_CHECK(!options.precisions.empty(), ConfigError, "--precision '", f.precisions,
              "' names no precision: give fp32, bf16 or both");
  options.models = selected_models(f, options.models);
  return options;
}

// Searches the largest sizes and writes the table (--out, --json).
int run_table(const TableFlags& f, int argc, char** argv) {
  spdlog::set_level(spdlog::level::from_str(f.log_level));
  auto result = tables::run_max_size(search_options(f));
  result.command = cli::command_line(argc, argv);
  publish(result, f.out, f.json_path);
  return cli::kExitOk;
}

}  // namespace
}  // namespace gpipe

int main(int argc, char** argv) {
  CLI::App app{
      "max_model_size: GPipe's Table 1 - the largest AmoebaNet-D (L, D) and Transformer-L whose "
      "training step fits a per-device memory budget, for naive-1 (one device, no "
      "re-materialisation, no micro-batches) and pipeline-K (K devices, M micro-batches, "
      "re-materialisation), ours beside the paper's.\n\n"
      "Memory is what the engine's meter charges to each device in a real training step: "
      "parameters, gradients, optimizer state (RMSProp for every row, as the paper: 12 bytes a "
      "parameter) and activations, the optimizer update included. The search predicts peaks "
      "from a per-layer memory profile, calibrates the prediction with each measured step, and "
      "reports only sizes whose measured step fitted. Run with OMP_WAIT_POLICY=PASSIVE (the "
      "wrapper experiments/max_model_size sets it)."};
  gpipe::TableFlags flags;
  gpipe::add_flags(app, flags);
  return gpipe::cli::run_main(app, argc, argv, [&] { return gpipe::run_table(flags, argc, argv); });
}
