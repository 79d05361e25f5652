// accuracy_table: GPipe's Table 4 beside ours, and the claim behind it that partitioning a model
// does not change what it learns.
//
//   build/bin/accuracy_table            # naive-1, pipeline-2, pipeline-4 on Fashion-MNIST
//   build/bin/accuracy_table --reuse    # rebuild the table from runs already made
//   build/bin/accuracy_table --preset fashion-mnist-cpu --epochs 2 --configs naive-1,pipeline-2
//
// Trains the same preset with the same seed as naive-1 (one device, no micro-batching, no
// re-materialisation) and as pipeline-K (K devices, the preset's M), evaluates each on the test
// split, and shows whether their accuracies agree within 0.5 points. Each run keeps its
// metrics, summary and trace in results/accuracy_table/<config>/. Writes
// results/accuracy_table.{md,csv,json} with the paper's Table 4 rows (AmoebaNet-B (18, 512),
// ImageNet then fine-tuned) beside ours; datasets we did not run are marked "not run".
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iomanip>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/timeline.h"
#include "train/trainer.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct PaperRow {
  const char* dataset;
  double top1;
  double top5;  // < 0: not reported
};

// GPipe Table 4: AmoebaNet-B (18, 512), trained on ImageNet-2012 then fine-tuned on the others.
constexpr PaperRow kPaper[] = {
    {"imagenet", 84.4, 97.0},    {"cifar10", 99.0, -1},     {"cifar100", 91.3, -1},
    {"stanford-cars", 94.6, -1}, {"oxford-pets", 95.9, -1}, {"food-101", 93.0, -1},
    {"fgvc-aircraft", 92.7, -1}, {"birdsnap", 83.6, -1},
};

// The trainer's options for `config` ("naive-1" or "pipeline-K") on top of the preset.
gpipe::train::TrainOptions options_for(const std::string& preset, const std::string& config,
                                       const std::vector<std::string>& overrides,
                                       const std::string& output_dir) {
  CLI::App app;
  app.set_config("--config");
  app.allow_config_extras(false);
  gpipe::train::TrainOptions options;
  gpipe::train::add_train_flags(app, options);
  std::vector<std::string> args{"accuracy_table", "--config",
                                gpipe::train::presets_dir() + "/" + preset + ".toml"};
  for (const auto& o : overrides)
    args.push_back(o);
  if (config == "naive-1") {
    args.insert(args.end(),
                {"--partitions", "1", "--balance", "", "--chunks", "1", "--checkpoint", "never"});
  } else {
    const std::string k = config.rfind("pipeline-", 0) == 0 ? config.substr(9) : "";
    GPIPE_CHECK(!k.empty() && k.find_first_not_of("0123456789") == std::string::npos && k != "0",
                gpipe::ConfigError, "unknown config '", config,
                "': expected naive-1 or pipeline-K with K >= 1");
    args.insert(args.end(), {"--partitions", k, "--balance", ""});
  }
  args.insert(args.end(), {"--output-dir", output_dir, "--progress", "log"});
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    throw gpipe::ConfigError(std::string("preset ") + preset + ": " + e.what());
  }
  return options;
}

std::string percent(const json& value, const char* missing = "-") {
  if (value.is_null()) return missing;
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << value.get<double>();
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "accuracy_table: GPipe's Table 4 beside ours; naive-1 against pipeline-K on one preset"};
  std::string preset = "fashion-mnist-cpu";
  std::string configs = "naive-1,pipeline-2,pipeline-4";
  std::string out = "results";
  int64_t epochs = 0;
  int64_t steps = 0;
  int64_t eval_batches = 0;
  bool reuse = false;
  double tolerance = 0.5;
  app.add_option("--preset", preset, "trainer preset (experiments/presets/NAME.toml)")
      ->capture_default_str();
  app.add_option("--configs", configs, "naive-1 and pipeline-K runs, comma-separated")
      ->capture_default_str();
  app.add_option("--epochs", epochs, "override the preset's epochs (0: keep)");
  app.add_option("--steps", steps, "cap every run at this many steps (0: no cap)");
  app.add_option("--eval-batches", eval_batches,
                 "evaluate on the first N test batches (0: the whole test split)");
  app.add_flag("--reuse", reuse, "read the runs' summaries when they exist instead of training");
  app.add_option("--out", out, "results folder")->capture_default_str();
  app.add_option("--tolerance", tolerance, "largest accepted top-1 spread, in points")
      ->capture_default_str();
  return gpipe::cli::run_main(app, argc, argv, [&]() -> int {
    std::vector<std::string> overrides;
    if (epochs > 0) overrides.insert(overrides.end(), {"--epochs", std::to_string(epochs)});
    if (steps > 0) overrides.insert(overrides.end(), {"--steps", std::to_string(steps)});
    if (eval_batches > 0)
      overrides.insert(overrides.end(), {"--eval-batches", std::to_string(eval_batches)});
    const auto runs_dir = fs::path(out) / "accuracy_table";
    fs::create_directories(runs_dir);
    json rows = json::array();
    std::string dataset;
    std::vector<double> ours;
    for (const auto& config : gpipe::cli::parse_strings(configs)) {
      const auto dir = runs_dir / config;
      const auto options = options_for(preset, config, overrides, dir.string());
      dataset = options.dataset;
      json summary;
      if (reuse && fs::exists(dir / "summary.json")) {
        std::ifstream in(dir / "summary.json");
        summary = json::parse(in);
        spdlog::info("{}: reusing {}", config, (dir / "summary.json").string());
      } else {
        spdlog::info("{}: training {} on {} ({} epochs)", config, options.model.name,
                     options.dataset, options.epochs);
        gpipe::train::Trainer trainer(options);
        const auto result = trainer.run();
        summary = result.to_json();
        summary["config"] = options.to_json();
        gpipe::write_json_file((dir / "summary.json").string(), summary);
      }
      GPIPE_CHECK(!summary["final_test_top1"].is_null(), gpipe::ConfigError, config,
                  " has no test accuracy: the preset's dataset must have a test split");
      const double top1 = 100 * summary["final_test_top1"].get<double>();
      const double top5 = 100 * summary["final_test_top5"].get<double>();
      ours.push_back(top1);
      rows.push_back({{"config", config},
                      {"dataset", options.dataset},
                      {"model", options.model.name},
                      {"K", config == "naive-1" ? 1 : std::stoi(config.substr(9))},
                      {"M", config == "naive-1" ? 1 : options.chunks},
                      {"test_top1", top1},
                      {"test_top5", top5},
                      {"throughput_samples_per_s", summary["throughput_samples_per_s"]},
                      {"source", "ours"}});
      spdlog::info("{}: test top-1 {:.2f}%, top-5 {:.2f}%", config, top1, top5);
    }
    const auto [lo, hi] = std::minmax_element(ours.begin(), ours.end());
    const double spread = ours.empty() ? 0 : *hi - *lo;
    for (const auto& p : kPaper) {
      rows.push_back({{"config", "paper AmoebaNet-B (18, 512)"},
                      {"dataset", p.dataset},
                      {"model", "amoebanet-b"},
                      {"test_top1", p.top1},
                      {"test_top5", p.top5 < 0 ? json(nullptr) : json(p.top5)},
                      {"source", "paper"},
                      {"ours", p.dataset == dataset ? json("run") : json("not run")}});
    }
    const json result = {{"rows", rows},
                         {"top1_spread_points", spread},
                         {"tolerance_points", tolerance},
                         {"agree", spread <= tolerance},
                         {"preset", preset},
                         {"command", gpipe::cli::command_line(argc, argv)}};
    gpipe::write_json_file((fs::path(out) / "accuracy_table.json").string(), result);
    std::ofstream csv(fs::path(out) / "accuracy_table.csv");
    csv << "config,dataset,test_top1,test_top5,source\n";
    for (const auto& r : rows) {
      csv << r["config"].get<std::string>() << "," << r["dataset"].get<std::string>() << ","
          << percent(r["test_top1"]) << "," << percent(r["test_top5"]) << ","
          << r["source"].get<std::string>() << "\n";
    }
    std::ostringstream md;
    md << "# Accuracy: pipeline partitioning does not change model quality\n\n"
       << "Ours: preset `" << preset << "` (" << dataset << "), the same seed for every run. "
       << "Top-1 spread " << std::fixed << std::setprecision(2) << spread << " points (bound "
       << tolerance << "): " << (spread <= tolerance ? "they agree" : "THEY DO NOT AGREE")
       << ".\n\n| config | dataset | test top-1 (%) | test top-5 (%) | source "
          "|\n|---|---|---|---|---|\n";
    for (const auto& r : rows) {
      md << "| " << r["config"].get<std::string>() << " | " << r["dataset"].get<std::string>()
         << " | " << percent(r["test_top1"]) << " | " << percent(r["test_top5"]) << " | "
         << r["source"].get<std::string>()
         << (r.contains("ours") && r["ours"] == "not run" ? " (ours: not run)" : "") << " |\n";
    }
    md << "\nThe paper's rows are GPipe Table 4 (AmoebaNet-B (18, 512) trained on ImageNet at "
          "480x480, then fine-tuned); the datasets marked \"not run\" are not on this machine.\n\n"
       << "Made by: `" << result["command"].get<std::string>() << "`\n";
    std::ofstream(fs::path(out) / "accuracy_table.md") << md.str();
    std::ofstream(runs_dir / "COMMAND") << result["command"].get<std::string>() << "\n";
    std::cout << md.str();
    return spread <= tolerance ? gpipe::cli::kExitOk : gpipe::cli::kExitFailure;
  });
}
