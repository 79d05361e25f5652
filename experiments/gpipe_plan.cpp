// gpipe_plan: the fastest pipeline configuration that fits each device's memory.
//
//   gpipe_plan --model mlp --layers 8 --width 512 --batch-size 64 --memory-per-device 64MiB
//   gpipe_plan --preset transformer-cpu --memory-per-device 256MiB --top 5 --verify 3 --json p.json
//   gpipe_plan --model amoebanet-d --devices cuda:0,cuda:1,cuda:2,cuda:3 --memory-per-device 16GiB
//
// It takes gpipe_train's flags (the model, --batch-size, the optimizer; --devices N plans over N
// CPU cores, a cuda list over those devices), measures the model's layers at every micro-batch
// size it considers (plan/cost_book.h; --cache FILE keeps them), predicts every configuration
// (plan/planner.h) and prints the plans that fit, fastest first, each with a ready gpipe_train
// command. --verify T runs the top T for a few steps and adds the measured step time and peak
// bytes (a plan with replicas runs as K x R gpipe_train processes, plan/rank_launcher.h);
// --grid "K=2,M=8,schedule=1f1b;..." predicts and measures hand-picked shapes beside them.
// --schedule limits the search to one schedule: a kind, or file:PATH (a schedule file, which
// also fixes K and M; core/include/gpipe/schedule_file.h). Measured plans run one after another in
// --verify-rounds rounds and report the median step of all rounds, so that a machine whose speed
// drifts slows every plan alike. Exit status: 0 plans printed, 2 bad flags or nothing fits (the
// message names the smallest budget that would fit and its plan), 1 a failure while measuring.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/errors.h"
#include "gpipe/files.h"
#include "gpipe/models/registry.h"
#include "gpipe/timeline.h"
#include "gpipe/timing.h"
#include "plan/rank_launcher.h"
#include "train/train_plan.h"
#include "train/trainer.h"

namespace {

using namespace gpipe;

// `args` less the flags in `drop` (each with its value, whether given as "--flag value" or
// "--flag=value") and the flags in `bare`, which take none.
std::vector<std::string> without_flags(const std::vector<std::string>& args,
                                       const std::set<std::string>& drop,
                                       const std::set<std::string>& bare = {}) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto name = args[i].substr(0, args[i].find('='));
    if (bare.count(name) > 0) continue;
    if (drop.count(name) == 0) {
      kept.push_back(args[i]);
    } else if (name == args[i]) {
      ++i;  // skip the value
    }
  }
  return kept;
}

constexpr const char* kPlannerGroup = "Planner";
constexpr int64_t kMaxPlans = 1000;  // plans to print or verify
constexpr int64_t kMaxRounds = 100;  // measuring rounds

// The user's arguments less those a plan sets and those only the planner reads: every option of
// the trainer's pipeline and planning groups, gpipe_plan's --json, and every option of the app's
// "Planner" group, so that a new planner flag cannot reach gpipe_train (which exits 2 on a flag
// it does not know: --calibration-extra-rounds did, in a plan of two replicas) nor a new pipeline
// flag be given twice, the user's value beside the plan's.
std::vector<std::string> passthrough(const CLI::App& app, int argc, char** argv) {
  const std::set<std::string> groups = {train::kPipelineGroup, train::kPlanningGroup,
                                        kPlannerGroup};
  std::set<std::string> drop = {"--json"};
  std::set<std::string> bare;
  for (const auto* option : app.get_options()) {
    if (groups.count(option->get_group()) == 0) continue;
    auto& names = option->get_expected_max() == 0 ? bare : drop;
    for (const auto& name : option->get_lnames())
      names.insert("--" + name);
    for (const auto& name : option->get_snames())
      names.insert("-" + name);
  }
  return without_flags(std::vector<std::string>(argv + 1, argv + argc), drop, bare);
}

// Measures one round of `plan`: in this process, or as gpipe_train processes (the program beside
// this one) when its replicas need several. 2 warm-up steps, then about a second of steps over
// all `rounds` and at least 5 (3 a round): a median of 5 steps of a few tens of milliseconds
// moves with every hiccup of a shared machine.
// With `paired`, the plan's calibration is measured again first and the plan predicted from it:
// that round's prediction, sharing the measurement's minute of a drifting machine. It warms up
// for 2 steps: one was not enough right after a plan run as processes (results/README.md, "The
// planner").
void measure(plan::Plan& plan, plan::CostBook& book, const plan::PlanRequest& request,
             const std::vector<std::string>& pass, int rounds, bool paired) {
  if (paired) {
    const double now =
        book.measure_calibration(plan::calibration_key(book, request, plan.shape), 2);
    plan.paired_round_ms.push_back(
        plan::predict(book, request, plan.shape, plan.shape.stage_balance(), now).step_ms);
    spdlog::info("paired prediction {:.1f} ms (planned {:.1f} ms)", plan.paired_round_ms.back(),
                 plan.step_ms);
  }
  const int warmup = 2;
  const int steps = steps_lasting(1000.0 / rounds, plan.step_ms, rounds == 1 ? 5 : 3);
  if (plan.shape.R == 1) return plan::verify(plan, book, request, warmup, steps);
  const auto train = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "gpipe_train";
  plan::verify_in_processes(
      plan, train.string(),
      without_flags(pass, {"--steps", "--progress", "--eval-every", "--output-dir"}), warmup,
      steps);
}

std::string command(const plan::Plan& plan, const std::vector<std::string>& args) {
  std::string out;
  if (plan.shape.R > 1) {
    out = "scripts/launch.sh --nproc-per-node " + std::to_string(plan.shape.K * plan.shape.R) +
          " -- build/bin/gpipe_train --distributed";
  } else {
    out = "build/bin/gpipe_train";
  }
  for (const auto& a : args)
    out += " " + a;
  for (const auto& f : to_flags(plan.shape))
    out += " " + f;
  return out;
}

void print_table(const std::vector<plan::Plan>& plans, const plan::PlanRequest& request) {
  std::cout << "| # | K | R | M | schedule | v | checkpoint | threads | balance | predicted ms "
               "| samples/s | peak/device | headroom | measured ms | measured peak |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < plans.size(); ++i) {
    const auto& p = plans[i];
    const auto& s = p.shape;
    const auto balance = c10::Join(",", s.device_balance());
    double measured_peak = 0;
    for (auto b : p.measured_peak_bytes)
      measured_peak = std::max(measured_peak, static_cast<double>(b));
    std::cout << "| " << i + 1 << " | " << s.K << " | " << s.R << " | " << s.M << " | "
              << s.schedule_name() << " | " << s.v << " | " << to_string(s.checkpoint) << " | "
              << s.threads << " | " << balance << " | " << fixed(p.step_ms, 1) << " | "
              << fixed(p.samples_per_s, 1) << " | " << format_bytes(p.max_peak_bytes()) << " | "
              << (request.memory_per_device > 0
                      ? format_bytes(request.memory_per_device - p.max_peak_bytes())
                      : "-")
              << " | " << fixed_or_dash(p.measured_step_ms, 1) << " | "
              << (p.measured_step_ms ? format_bytes(measured_peak) : "-") << " |\n";
  }
}

// gpipe_plan's own flags, the "Planner" group; the rest are gpipe_train's.
struct PlannerOptions {
  std::string link = "none", cache, grid;
  int64_t top = 5, verify_top = 0, verify_rounds = 3, max_chunks = 32, max_replicas = 0;
  int calibration_rounds = 3, calibration_extra_rounds = 0;
  bool verify_paired = false;
  double allreduce_gbs = 0;
};

// Declares the planner's flags in kPlannerGroup (passthrough keeps them from gpipe_train).
void add_planner_flags(CLI::App& app, PlannerOptions& o) {
  const char* group = kPlannerGroup;
  app.add_option("--link", o.link, "copy between stages: none | pcie | nvlink | tpu")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { link_preset(name); }))
      ->group(group);
  app.add_option("--top", o.top, "plans to print")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{1}, kMaxPlans))
      ->group(group);
  app.add_option("--verify", o.verify_top, "run the top T plans for a few steps and measure them")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, kMaxPlans))
      ->group(group);
  app.add_option("--verify-rounds", o.verify_rounds,
                 "measure the verified and grid plans in turn this many times (median of all)")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{1}, kMaxRounds))
      ->group(group);
  app.add_flag("--verify-paired", o.verify_paired,
               "also predict each measured plan in each round from its calibration measured right "
               "before that round (paired_predicted_round_ms): a check of the cost model that the "
               "machine's drift between planning and measuring does not move")
      ->group(group);
  app.add_option(
         "--calibration-rounds", o.calibration_rounds,
         "measure the calibration steps of the plans within 1.25x of the fastest (6 at most) this "
         "many times, all in turn, and predict from the medians")
      ->capture_default_str()
      ->check(cli::int_range(1, static_cast<int>(kMaxRounds)))
      ->group(group);
  app.add_option("--calibration-extra-rounds", o.calibration_extra_rounds,
                 "then measure again, up to this many rounds more, the calibrations of the plans "
                 "within 1.10x of the fastest (3 at most) and of the grid whose rounds spread over "
                 "10% (slowest over fastest): rounds taken in busy minutes are outvoted")
      ->capture_default_str()
      ->check(cli::int_range(0, static_cast<int>(kMaxRounds)))
      ->group(group);
  app.add_option("--grid", o.grid,
                 "hand-picked shapes to predict and measure beside the plans, ';'-separated: "
                 "\"K=2,M=8,schedule=1f1b,checkpoint=never;K=1,M=4\"")
      ->check(cli::parsed_by([](const std::string& text) {
        GPIPE_CHECK(!text.empty(), ConfigError, "an empty grid; leave the flag out instead");
        for (const auto& item : cli::parse_strings(text, ';'))
          parse_shape(item);
      }))
      ->group(group);
  app.add_option("--cache", o.cache, "JSON file of measured layer costs to reuse and extend")
      ->check(cli::output_file())
      ->group(group);
  app.add_option("--max-chunks", o.max_chunks, "largest M considered")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{1}, int64_t{1} << 24))
      ->group(group);
  app.add_option("--max-replicas", o.max_replicas, "largest data-parallel R (0: no limit)")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, int64_t{4096}))
      ->group(group);
  app.add_option("--allreduce-gbs", o.allreduce_gbs,
                 "bandwidth of the replicas' gradient all-reduce, GB/s; 0: time it here (Gloo "
                 "between threads, as CPU replicas sum); give an accelerator's interconnect")
      ->capture_default_str()
      ->check(cli::finite_range(0, 1e6))
      ->group(group);
}

// The trainer's request (model, batch, devices, memory) with the planner's flags.
plan::PlanRequest planner_request(const train::TrainOptions& options, const PlannerOptions& o) {
  auto request = train::plan_request(options);
  request.link = o.link;
  request.max_chunks = o.max_chunks;
  request.max_replicas = o.max_replicas;
  request.allreduce_gbs = o.allreduce_gbs;
  request.calibration_rounds = o.calibration_rounds;
  request.calibration_extra_rounds = o.calibration_extra_rounds;
  return request;
}

// The --grid shapes, predicted.
std::vector<plan::Plan> predict_grid(plan::CostBook& book, const plan::PlanRequest& request,
                                     const std::vector<PipelineShape>& grid_shapes,
                                     const PlannerOptions& o) {
  // The grid's predictions rest on calibrations measured in as many rounds as the plans'.
  std::vector<costs::CalibrationKey> grid_calibrations;
  for (const auto& shape : grid_shapes)
    grid_calibrations.push_back(plan::calibration_key(book, request, shape));
  book.calibrate_in_rounds(grid_calibrations, o.calibration_rounds, o.calibration_extra_rounds);
  std::vector<plan::Plan> grid_plans;
  for (const auto& shape : grid_shapes)
    grid_plans.push_back(plan::predict(book, request, shape));
  return grid_plans;
}

// Measures the top --verify plans of `shown` and every grid plan, all of them in turn in each of
// --verify-rounds rounds (see measure).
void measure_in_rounds(std::vector<plan::Plan>& shown, std::vector<plan::Plan>& grid_plans,
                       plan::CostBook& book, const plan::PlanRequest& request,
                       const std::vector<std::string>& pass, const PlannerOptions& o) {
  std::vector<plan::Plan*> to_measure;
  for (int64_t i = 0; i < std::min<int64_t>(o.verify_top, shown.size()); ++i)
    to_measure.push_back(&shown[i]);
  for (auto& p : grid_plans)
    to_measure.push_back(&p);
  for (int64_t round = 1; round <= o.verify_rounds && !to_measure.empty(); ++round) {
    for (size_t i = 0; i < to_measure.size(); ++i) {
      spdlog::info("measuring, round {} of {}, plan {} of {}: {}", round, o.verify_rounds, i + 1,
                   to_measure.size(), to_measure[i]->shape.describe());
      measure(*to_measure[i], book, request, pass, static_cast<int>(o.verify_rounds),
              o.verify_paired);
    }
  }
}

// Prints the plans' table, the grid's, and the best plan's gpipe_train command.
void print_report(const std::vector<plan::Plan>& shown, const std::vector<plan::Plan>& grid_plans,
                  const plan::PlanRequest& request, const std::vector<std::string>& pass) {
  print_table(shown, request);
  if (!grid_plans.empty()) {
    std::cout << "\nGrid:\n";
    print_table(grid_plans, request);
  }
  std::cout << "\nbest: " << command(shown.front(), pass) << "\n";
}

// `plans` as JSON, each with its command, the calibration it was predicted from and whether it
// fits --memory-per-device.
nlohmann::json plans_json(const std::vector<plan::Plan>& plans, const plan::CostBook& book,
                          const plan::PlanRequest& request, const std::vector<std::string>& pass) {
  auto list = nlohmann::json::array();
  for (const auto& p : plans) {
    auto j = plan::to_json(p, request);
    j["command"] = command(p, pass);
    const auto in_use = book.calibration_in_use(plan::calibration_key(book, request, p.shape));
    j["calibration"] = in_use;
    j["calibration_rounds"] = book.calibration_rounds(in_use);
    j["fits"] = request.memory_per_device <= 0 || p.max_peak_bytes() <= request.memory_per_device;
    list.push_back(j);
  }
  return list;
}

// What one planning produced: the plans it shows and measures, and the search's counts.
struct Outcome {
  std::vector<plan::Plan> shown;  // the top --top plans, fastest first
  std::vector<plan::Plan> grid;   // the --grid shapes
  int64_t considered = 0;         // shapes the search predicted
  size_t fit = 0;                 // of them, those that fit
  double planning_s = 0;          // from the start to the search's end
};

// Writes --json: the plans, the grid, what the search considered, the request and the command.
void write_json_report(const std::string& path, const Outcome& outcome, const plan::CostBook& book,
                       const plan::PlanRequest& request, const std::vector<std::string>& pass,
                       const std::string& command_line) {
  auto json = nlohmann::json::object();
  json["plans"] = plans_json(outcome.shown, book, request, pass);
  json["grid"] = plans_json(outcome.grid, book, request, pass);
  json["considered"] = outcome.considered;
  json["fit"] = outcome.fit;
  json["memory_per_device"] = request.memory_per_device;
  json["batch_size"] = request.batch;
  json["cores"] = request.devices.empty() ? nlohmann::json(request.cores) : nlohmann::json();
  json["devices"] = request.devices;
  json["planning_seconds"] = outcome.planning_s;
  json["command"] = command_line;
  write_json_file(path, json);
}

// Plans, measures and reports: the body of main once the flags are read. `app`, `argc` and
// `argv` give the arguments that the printed gpipe_train commands pass on.
int plan_and_report(const CLI::App& app, int argc, char** argv, const train::TrainOptions& options,
                    const PlannerOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  train::check_train_options(options);
  check_distinct_outputs({{"--json", options.json}, {"--cache", o.cache}});
  if (o.verify_top > 0) {
    // A replicated plan is verified in a temporary folder: a TMPDIR that is no folder is a bad
    // setting, named now rather than after planning.
    std::error_code error;
    const auto folder = std::filesystem::temp_directory_path(error);
    GPIPE_CHECK(!error && !folder.empty(), ConfigError,
                "--verify needs a temporary folder: ", error.message(), " (TMPDIR='",
                printable(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : ""),
                "'; set TMPDIR to a writable folder)");
  }
  train::check_fits_host(*models::make_model(options.model), options);
  auto request = planner_request(options, o);
  if (app.count("--schedule") > 0) request.schedule = options.shape;  // only that schedule
  std::vector<PipelineShape> grid_shapes;
  for (const auto& item : cli::parse_strings(o.grid, ';'))
    grid_shapes.push_back(parse_shape(item));
  auto book = train::cost_book(options, request, o.cache);
  auto result = plan::search(book, request);
  Outcome outcome;
  outcome.planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.considered = result.considered;
  outcome.fit = result.ranked.size();
  spdlog::info("planned in {:.1f} s: {} shapes predicted, {} fit; {} layer measurements made",
               outcome.planning_s, result.considered, result.ranked.size(), book.measured());
  if (result.ranked.empty()) {
    spdlog::error("{}", train::nothing_fits(result, request));
    return cli::kExitBadInput;
  }
  outcome.shown.assign(result.ranked.begin(),
                       result.ranked.begin() + std::min<int64_t>(o.top, result.ranked.size()));
  const auto pass = passthrough(app, argc, argv);
  outcome.grid = predict_grid(book, request, grid_shapes, o);
  measure_in_rounds(outcome.shown, outcome.grid, book, request, pass, o);
  print_report(outcome.shown, outcome.grid, request, pass);
  if (!options.json.empty()) {
    write_json_report(options.json, outcome, book, request, pass, cli::command_line(argc, argv));
  }
  return cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpipe_plan: measures a model and ranks the pipeline configurations (K, replicas, "
      "micro-batches, schedule, virtual stages, re-materialisation, balance, threads) that fit "
      "--memory-per-device, fastest first"};
  app.set_config("--config", "", "TOML file of gpipe_train flags");
  app.allow_config_extras(false);
  app.add_option("--preset", "a preset of experiments/presets (its .toml name)")->group("Presets");
  train::TrainOptions options;
  train::add_train_flags(app, options);
  PlannerOptions planner;
  add_planner_flags(app, planner);
  return train::run_with_presets(
      app, argc, argv, [&] { return plan_and_report(app, argc, argv, options, planner); });
}
