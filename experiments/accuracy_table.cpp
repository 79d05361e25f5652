// accuracy_table: GPipe's Table 4 beside ours, the claim behind it that partitioning a model
// does not change what it learns, and Table 4's transfer protocol in shape.
//
//   build/bin/accuracy_table            # naive-1, pipeline-2, pipeline-4, then the transfer runs
//   build/bin/accuracy_table --reuse    # rebuild the table from runs already made
//   build/bin/accuracy_table --preset fashion-mnist-cpu --epochs 2 --configs naive-1,pipeline-2
//   build/bin/accuracy_table --configs "" --runs 5   # only the transfer rows
//
// Partitioning: trains the same preset with the same seed as naive-1 (one device, no
// micro-batching, no re-materialisation) and as pipeline-K (K devices, the preset's M),
// evaluates each on the test split, and shows whether their accuracies agree within 0.5 points.
//
// Transfer (the paper fine-tunes an ImageNet model on other datasets; this machine has one real
// dataset, so its classes are split into two tasks): pretrain the preset on classes
// --pretrain-classes (0-4), then fine-tune on --finetune-classes (5-9) from that snapshot with a
// new randomly initialised head and the pretraining hyper-parameters, random flips and cutout,
// --runs times (seeds 0..runs-1), against training from scratch on 5-9 with the same steps and
// seeds. Rows finetune-5-9 and scratch-5-9 carry the mean and sample standard deviation.
//
// Each run keeps its metrics, summary and trace in results/accuracy_table/<config>/ (transfer
// runs in <config>/seed-<s>/). Writes results/accuracy_table.{md,csv,json} with the paper's
// Table 4 rows (AmoebaNet-B (18, 512), ImageNet then fine-tuned) beside ours; datasets we did
// not run are marked "not run".
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>

#include "common/cli.h"
#include "gpipe/datasets/class_subset.h"
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

// The trainer's options: the preset, then `args` (later flags win).
gpipe::train::TrainOptions options_for(const std::string& preset,
                                       const std::vector<std::string>& args) {
  CLI::App app;
  app.set_config("--config");
  app.allow_config_extras(false);
  gpipe::train::TrainOptions options;
  gpipe::train::add_train_flags(app, options);
  std::vector<std::string> all{"accuracy_table", "--config",
                               gpipe::train::presets_dir() + "/" + preset + ".toml"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all)
    argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    throw gpipe::ConfigError(std::string("preset ") + preset + ": " + e.what());
  }
  return options;
}

// The flags that make `config` ("naive-1" or "pipeline-K") of the preset; K in `k`.
std::vector<std::string> partition_args(const std::string& config, int64_t* k) {
  if (config == "naive-1") {
    *k = 1;
    return {"--partitions", "1", "--balance", "", "--chunks", "1", "--checkpoint", "never"};
  }
  const std::string digits = config.rfind("pipeline-", 0) == 0 ? config.substr(9) : "";
  GPIPE_CHECK(!digits.empty() && digits.size() < 6 &&
                  digits.find_first_not_of("0123456789") == std::string::npos && digits != "0",
              gpipe::ConfigError, "unknown config '", config,
              "': expected naive-1 or pipeline-K with K >= 1");
  *k = std::stoll(digits);
  return {"--partitions", digits, "--balance", ""};
}

// One run of the preset: the trainer's options and the summary it wrote.
struct Run {
  gpipe::train::TrainOptions options;
  json summary;
};

// Trains the preset with `args` into `dir` (or, with `reuse`, reads the summary already there);
// `label` names the run in the log.
Run train_or_reuse(const std::string& preset, std::vector<std::string> args, const fs::path& dir,
                   bool reuse, const std::string& label) {
  // The table owns its runs' folders: a run that is not reused replaces the results there.
  args.insert(args.end(),
              {"--output-dir", dir.string(), "--overwrite-results", "--progress", "log"});
  Run run{options_for(preset, args), json()};
  if (reuse && fs::exists(dir / "summary.json")) {
    std::ifstream in(dir / "summary.json");
    spdlog::info("{}: reusing {}", label, (dir / "summary.json").string());
    run.summary = json::parse(in);
  } else {
    spdlog::info("{}: training {} on {} ({} epochs)", label, run.options.model.name(),
                 run.options.dataset, run.options.epochs);
    gpipe::train::Trainer trainer(run.options);
    run.summary = trainer.run().to_json();
    run.summary["config"] = run.options.to_json();
    gpipe::write_json_file((dir / "summary.json").string(), run.summary);
  }
  GPIPE_CHECK(run.summary.contains("final_test_top1") && !run.summary["final_test_top1"].is_null(),
              gpipe::ConfigError, label,
              " has no test accuracy: the preset's dataset must have a test split");
  return run;
}

struct TransferOptions {
  std::string pretrain_classes = "0-4";
  std::string finetune_classes = "5-9";
  int64_t runs = 5;    // fine-tuning runs and scratch runs, seeds 0..runs-1 (0: none)
  int64_t epochs = 2;  // of each fine-tuning and scratch run
  int64_t cutout = 8;  // pixels a side
};

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Sample standard deviation (n - 1); 0 for one value.
double std_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean_of(v);
  double sum = 0;
  for (const double x : v)
    sum += (x - m) * (x - m);
  return std::sqrt(sum / static_cast<double>(v.size() - 1));
}

// The pretraining row and the fine-tuning and scratch rows of the transfer protocol.
json transfer_rows(const std::string& preset, const std::vector<std::string>& overrides,
                   const TransferOptions& t, const fs::path& runs_dir, bool reuse) {
  json rows = json::array();
  const std::string from = "pretrain-" + t.pretrain_classes;
  const auto pretrain_dir = runs_dir / from;
  const auto snapshot = pretrain_dir / "snapshot";
  auto args = overrides;
  // The table owns the folder: a pre-training run that is not reused replaces its snapshot.
  args.insert(args.end(), {"--class-subset", t.pretrain_classes, "--snapshot-dir",
                           snapshot.string(), "--keep-snapshots", "1", "--overwrite-snapshots"});
  // The fine-tuning runs need the snapshot, which is not kept in the repository.
  const bool have_snapshot = fs::exists(snapshot / "latest");
  const auto pretrain = train_or_reuse(preset, args, pretrain_dir, reuse && have_snapshot, from);
  const auto& pretrain_options = pretrain.options;
  auto row = [&](const std::string& config, const std::string& classes,
                 const std::vector<json>& summaries) {
    std::vector<double> top1, top5;
    for (const auto& s : summaries) {
      top1.push_back(100 * s["final_test_top1"].get<double>());
      top5.push_back(100 * s["final_test_top5"].get<double>());
    }
    spdlog::info("{}: test top-1 {:.2f} +- {:.2f}% over {} run(s)", config, mean_of(top1),
                 std_of(top1), top1.size());
    return json{{"config", config},
                {"dataset", pretrain_options.dataset + " classes " + classes},
                {"model", pretrain_options.model.name()},
                {"K", pretrain_options.shape.K},
                {"M", pretrain_options.shape.M},
                {"runs", summaries.size()},
                {"steps", summaries.front()["steps"]},
                {"test_top1", mean_of(top1)},
                {"test_top5", mean_of(top5)},
                {"test_top1_mean", mean_of(top1)},
                {"test_top1_std", std_of(top1)},
                {"test_top1_runs", top1},
                {"source", "ours"}};
  };
  rows.push_back(row(from, t.pretrain_classes, {pretrain.summary}));
  for (const bool finetune : {true, false}) {
    const std::string config = (finetune ? "finetune-" : "scratch-") + t.finetune_classes;
    std::vector<json> summaries;
    for (int64_t seed = 0; seed < t.runs; ++seed) {
      auto run_args = overrides;
      run_args.insert(run_args.end(), {"--class-subset", t.finetune_classes, "--epochs",
                                       std::to_string(t.epochs), "--seed", std::to_string(seed),
                                       "--augment", "--cutout", std::to_string(t.cutout)});
      if (finetune) {
        run_args.insert(run_args.end(), {"--finetune-from", snapshot.string()});
      }
      const auto dir = runs_dir / config / ("seed-" + std::to_string(seed));
      summaries.push_back(
          train_or_reuse(preset, run_args, dir, reuse, config + " seed " + std::to_string(seed))
              .summary);
    }
    rows.push_back(row(config, t.finetune_classes, summaries));
  }
  return rows;
}

std::string percent(const json& value, const char* missing = "-") {
  if (value.is_null()) return missing;
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << value.get<double>();
  return out.str();
}

// What the command line asks for.
struct TableOptions {
  std::string preset = "fashion-mnist-cpu";
  std::string configs = "naive-1,pipeline-2,pipeline-4";
  std::string out = "results";
  int64_t epochs = 0;
  int64_t steps = 0;
  int64_t eval_batches = 0;
  int64_t batch_size = 0;
  bool reuse = false;
  double tolerance = 0.5;
  TransferOptions transfer;
};

// Declares the flags of the partitioning runs and of the table.
void add_table_flags(CLI::App& app, TableOptions& o) {
  namespace cli = gpipe::cli;
  app.add_option("--preset", o.preset, "trainer preset (experiments/presets/NAME.toml)")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { options_for(name, {}); }));
  app.add_option("--configs", o.configs,
                 "naive-1 and pipeline-K runs, comma-separated (may be empty)")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& text) {
        int64_t k = 0;
        if (!text.empty())
          for (const auto& config : cli::parse_names(text, ""))
            partition_args(config, &k);
      }));
  app.add_option("--epochs", o.epochs,
                 "override the preset's epochs (0: keep); not the fine-tuning and scratch runs")
      ->check(cli::int_range(int64_t{0}, int64_t{1000000}));
  app.add_option("--steps", o.steps, "cap every run at this many steps (0: no cap)")
      ->check(cli::int_range(int64_t{0}, int64_t{1} << 32));
  app.add_option("--eval-batches", o.eval_batches,
                 "evaluate on the first N test batches (0: the whole test split)")
      ->check(cli::int_range(int64_t{0}, int64_t{1} << 24));
  app.add_option("--batch-size", o.batch_size,
                 "override the preset's training and evaluation batch size (0: keep); for quick "
                 "checks, a multiple of the preset's micro-batch count")
      ->check(cli::int_range(int64_t{0}, int64_t{1} << 24));
  app.add_flag("--reuse", o.reuse, "read the runs' summaries when they exist instead of training");
  app.add_option("--out", o.out, "results folder")
      ->capture_default_str()
      ->check(cli::output_folder());
  app.add_option("--tolerance", o.tolerance, "largest accepted top-1 spread, in points")
      ->check(cli::finite_range(0, 100))
      ->capture_default_str();
}

// Declares the flags of the transfer runs, in the "Transfer" group.
void add_transfer_flags(CLI::App& app, TransferOptions& transfer) {
  namespace cli = gpipe::cli;
  const auto classes =
      cli::parsed_by([](const std::string& text) { gpipe::datasets::parse_class_list(text); });
  const char* group = "Transfer";
  app.add_option("--pretrain-classes", transfer.pretrain_classes, "classes to pretrain on")
      ->capture_default_str()
      ->check(classes)
      ->group(group);
  app.add_option("--finetune-classes", transfer.finetune_classes,
                 "classes to fine-tune on, and to train on from scratch")
      ->capture_default_str()
      ->check(classes)
      ->group(group);
  app.add_option("--runs", transfer.runs, "fine-tuning and scratch runs, seeds 0..N-1 (0: none)")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, int64_t{1000}))
      ->group(group);
  app.add_option("--transfer-epochs", transfer.epochs, "epochs of each fine-tuning and scratch run")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{1}, int64_t{1000000}))
      ->group(group);
  app.add_option("--cutout", transfer.cutout, "cutout side in pixels of the fine-tuning runs")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, int64_t{1} << 14))
      ->group(group);
}

// The trainer flags every run gets: --steps, --eval-batches and --batch-size when given.
std::vector<std::string> run_overrides(const TableOptions& o) {
  std::vector<std::string> overrides;
  if (o.steps > 0) overrides.insert(overrides.end(), {"--steps", std::to_string(o.steps)});
  if (o.eval_batches > 0)
    overrides.insert(overrides.end(), {"--eval-batches", std::to_string(o.eval_batches)});
  if (o.batch_size > 0)
    for (const char* flag : {"--batch-size", "--eval-batch-size"})
      overrides.insert(overrides.end(), {flag, std::to_string(o.batch_size)});
  return overrides;
}

// Trains (or reuses) each of --configs and returns their rows; their top-1 goes to `ours`.
json partition_rows(const TableOptions& o, const std::vector<std::string>& overrides,
                    const fs::path& runs_dir, std::vector<double>* ours) {
  json rows = json::array();
  for (const auto& config : gpipe::cli::parse_strings(o.configs)) {
    int64_t k = 1;
    auto args = partition_args(config, &k);
    if (o.epochs > 0) args.insert(args.end(), {"--epochs", std::to_string(o.epochs)});
    args.insert(args.end(), overrides.begin(), overrides.end());
    const auto [options, summary] =
        train_or_reuse(o.preset, args, runs_dir / config, o.reuse, config);
    const double top1 = 100 * summary["final_test_top1"].get<double>();
    const double top5 = 100 * summary["final_test_top5"].get<double>();
    ours->push_back(top1);
    rows.push_back({{"config", config},
                    {"dataset", options.dataset},
                    {"model", options.model.name()},
                    {"K", k},
                    {"M", config == "naive-1" ? 1 : options.shape.M},
                    {"test_top1", top1},
                    {"test_top5", top5},
                    {"throughput_samples_per_s", summary["throughput_samples_per_s"]},
                    {"source", "ours"}});
    spdlog::info("{}: test top-1 {:.2f}%, top-5 {:.2f}%", config, top1, top5);
  }
  return rows;
}

// The paper's Table 4 rows, each marked whether we ran its dataset (`dataset`).
json paper_rows(const std::string& dataset) {
  json rows = json::array();
  for (const auto& p : kPaper) {
    rows.push_back({{"config", "paper AmoebaNet-B (18, 512)"},
                    {"dataset", p.dataset},
                    {"model", "amoebanet-b"},
                    {"test_top1", p.top1},
                    {"test_top5", p.top5 < 0 ? json(nullptr) : json(p.top5)},
                    {"source", "paper"},
                    {"ours", p.dataset == dataset ? json("run") : json("not run")}});
  }
  return rows;
}

void write_csv(const fs::path& path, const json& rows) {
  std::ofstream csv(path);
  csv << "config,dataset,runs,test_top1,test_top1_std,test_top5,source\n";
  for (const auto& r : rows) {
    csv << r["config"].get<std::string>() << "," << r["dataset"].get<std::string>() << ","
        << r.value("runs", 1) << "," << percent(r["test_top1"]) << ","
        << percent(r.value("test_top1_std", json())) << "," << percent(r["test_top5"]) << ","
        << r["source"].get<std::string>() << "\n";
  }
}

// The Markdown table of every row, ours and the paper's.
void write_markdown_rows(std::ostream& md, const json& rows) {
  md << "| config | dataset | runs | test top-1 (%) | test top-5 (%) | source "
        "|\n|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const auto runs = r.value("runs", 1);
    md << "| " << r["config"].get<std::string>() << " | " << r["dataset"].get<std::string>()
       << " | " << (r["source"] == "paper" ? "-" : std::to_string(runs)) << " | "
       << percent(r["test_top1"])
       << (runs > 1 ? " +- " + percent(r["test_top1_std"]) : std::string()) << " | "
       << percent(r["test_top5"]) << " | " << r["source"].get<std::string>()
       << (r.contains("ours") && r["ours"] == "not run" ? " (ours: not run)" : "") << " |\n";
  }
}

// The transfer section: what was run, and whether fine-tuning beats training from scratch by
// more than the runs' standard deviation. `transfer_json` holds the pretraining, fine-tuning and
// scratch rows.
void write_markdown_transfer(std::ostream& md, const TransferOptions& transfer,
                             const std::string& dataset, const json& transfer_json) {
  const auto& ft = transfer_json[1];
  const auto& scratch = transfer_json[2];
  const double gain = ft["test_top1_mean"].get<double>() - scratch["test_top1_mean"].get<double>();
  const double spread_of_runs =
      std::max(ft["test_top1_std"].get<double>(), scratch["test_top1_std"].get<double>());
  md << std::fixed << std::setprecision(2)  // as the summary line before it
     << "\n## Transfer, in the shape of Table 4's protocol\n\n"
     << "Pretrained on " << dataset << " classes " << transfer.pretrain_classes << " ("
     << transfer_json[0]["steps"] << " steps), then " << transfer.runs
     << " fine-tuning runs (seeds 0-" << transfer.runs - 1 << ") on classes "
     << transfer.finetune_classes << " from that snapshot with a new randomly initialised "
     << "head, the pretraining hyper-parameters, random flips and " << transfer.cutout << "x"
     << transfer.cutout << " cutout, " << ft["steps"] << " steps each; against as many runs "
     << "from scratch with the same steps, seeds and augmentation. Mean +- sample standard "
     << "deviation. Fine-tuning " << (gain >= 0 ? "gains " : "loses ") << std::fabs(gain)
     << " points of top-1 over training from scratch"
     << (std::fabs(gain) < spread_of_runs
             ? ", less than the runs' standard deviation: no measurable difference at this "
               "budget.\n"
             : ", more than the runs' standard deviation.\n");
}

// The whole Markdown report: the verdict on the spread, the rows, the transfer section when the
// transfer runs ran, and the command that made it.
std::string markdown(const TableOptions& o, const std::string& dataset, const json& rows,
                     const json& transfer_json, double spread, const std::string& command) {
  std::ostringstream md;
  md << "# Accuracy: pipeline partitioning does not change model quality\n\n"
     << "Ours: preset `" << o.preset << "` (" << dataset << "), the same seed for every run. "
     << "Top-1 spread " << std::fixed << std::setprecision(2) << spread << " points (bound "
     << o.tolerance << "): " << (spread <= o.tolerance ? "they agree" : "THEY DO NOT AGREE")
     << ".\n\n";
  write_markdown_rows(md, rows);
  md << "\nThe paper's rows are GPipe Table 4 (AmoebaNet-B (18, 512) trained on ImageNet at "
        "480x480, then fine-tuned); the datasets marked \"not run\" are not on this machine.\n";
  if (transfer_json.size() == 3) write_markdown_transfer(md, o.transfer, dataset, transfer_json);
  md << "\nMade by: `" << command
     << "`. The committed results/accuracy_table.* come from results/accuracy_table.sh.\n";
  return md.str();
}

// Runs every configuration and the transfer protocol, then writes the JSON, CSV and Markdown
// reports and prints the Markdown. Exits 1 when the partitioning runs disagree.
int make_table(const TableOptions& o, int argc, char** argv) {
  const auto overrides = run_overrides(o);
  const auto runs_dir = fs::path(o.out) / "accuracy_table";
  fs::create_directories(runs_dir);
  const std::string dataset = options_for(o.preset, {}).dataset;
  std::vector<double> ours;
  json rows = partition_rows(o, overrides, runs_dir, &ours);
  json transfer_json = json::array();
  if (o.transfer.runs > 0) {
    auto args = overrides;
    if (o.epochs > 0) args.insert(args.end(), {"--epochs", std::to_string(o.epochs)});
    transfer_json = transfer_rows(o.preset, args, o.transfer, runs_dir, o.reuse);
    for (const auto& r : transfer_json)
      rows.push_back(r);
  }
  const auto [lo, hi] = std::minmax_element(ours.begin(), ours.end());
  const double spread = ours.empty() ? 0 : *hi - *lo;
  for (const auto& r : paper_rows(dataset))
    rows.push_back(r);
  const json result = {{"rows", rows},
                       {"top1_spread_points", spread},
                       {"tolerance_points", o.tolerance},
                       {"agree", spread <= o.tolerance},
                       {"preset", o.preset},
                       {"command", gpipe::cli::command_line(argc, argv)}};
  gpipe::write_json_file((fs::path(o.out) / "accuracy_table.json").string(), result);
  write_csv(fs::path(o.out) / "accuracy_table.csv", rows);
  const std::string command = result["command"].get<std::string>();
  const std::string md = markdown(o, dataset, rows, transfer_json, spread, command);
  std::ofstream(fs::path(o.out) / "accuracy_table.md") << md;
  std::ofstream(runs_dir / "COMMAND") << command << "\n";
  std::cout << md;
  return spread <= o.tolerance ? gpipe::cli::kExitOk : gpipe::cli::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "accuracy_table: GPipe's Table 4 beside ours; naive-1 against pipeline-K on one preset, "
      "and fine-tuning against training from scratch on held-out classes"};
  TableOptions options;
  add_table_flags(app, options);
  add_transfer_flags(app, options.transfer);
  return gpipe::cli::run_main(app, argc, argv,
                              [&]() -> int { return make_table(options, argc, argv); });
}
