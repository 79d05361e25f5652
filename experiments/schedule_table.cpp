// schedule_table: every schedule x K x M x re-materialisation for one model, against naive-2.
//
//   schedule_table --model amoebanet-d --layers 6 --filters 16 --image-size 64 --classes 10 \
//       --batch-size 64 --out results/schedule_table/amoebanet-d
//   schedule_table --preset transformer-cpu --ks 2,4 --ms 4,8 --checkpoints never --rounds 2
//
// (--measure-warmup and --measure-steps set each measurement's untimed and timed steps; the
// trainer's --steps and --epochs play no part.)
//
// It takes gpipe_train's flags for the model, the batch and the optimizer. Each cell is one
// pipeline shape (schedule, K, M, re-materialisation) that the schedule accepts and whose K x v
// stages each get a layer. Cells with K up to --max-measured-k (default: this machine's cores)
// are measured on CPU virtual devices, one thread each, all of them in turn in each of --rounds
// rounds (the median of every round's timed steps, so a drifting machine slows every cell
// alike); the others are simulated from the model's measured layer costs (plan/cost_book.h,
// --cache FILE keeps them). Every row is normalised to naive-2 (K=2, M=1, gpipe, no
// re-materialisation) of its own source: measured over measured, simulated over simulated.
// Columns: step, speedup, the step's device-time split into work and what is not (idle in the
// schedule's bubble, communication, re-materialisation, imbalance between stages:
// tables/breakdown.h), the peak memory per device, and for measured rows the largest loss
// difference, over the steps run, from the same model on one device at the same M (the engine
// without a pipeline, which the transparency tests hold to the plain model). Writes
// PREFIX.md, PREFIX.csv and PREFIX.json (--out). Exit status: 0 written, 2 bad flags, 1 a
// failure while measuring.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/cli.h"
#include "common/report.h"
#include "costs/measured_step.h"
#include "gpipe/errors.h"
#include "gpipe/models/registry.h"
#include "gpipe/timing.h"
#include "plan/planner.h"
#include "tables/breakdown.h"
#include "train/optimization.h"
#include "train/train_plan.h"
#include "train/trainer.h"

namespace gpipe {
namespace {

constexpr const char* kGroup = "Schedule table";
constexpr size_t kMaxListed = 64;                      // values of --ks and --ms
constexpr int64_t kMaxStageChunks = int64_t{1} << 20;  // K x v x M of a cell (gpipe_sim's bound)

// The table's own flags.
struct TableFlags {
  std::string ks = "2,4", ms = "2,4,8", checkpoints = "never,always", schedules = "all";
  int64_t max_measured_k = 0;  // 0: this machine's cores
  int rounds = 3, warmup = 1, steps = 2;
  std::string out, cache;
};

// One row: a shape, predicted, and measured where its K fits.
struct Cell {
  plan::Plan plan;
  bool measured = false;
  tables::StepBreakdown breakdown;
  std::vector<double> losses;  // measured: the last round's, every step
  std::optional<double> loss_difference;
  std::optional<double> speedup;
};

struct ScheduleTable {
  std::string model, command;
  int64_t batch = 0;
  int rounds = 0;
  std::vector<Cell> cells;
  double seconds = 0;
};

void add_table_flags(CLI::App& app, TableFlags& f) {
  app.add_option("--ks", f.ks, "K values (devices), e.g. 2,4")
      ->capture_default_str()
      ->check(cli::int_list(1, 4096))
      ->group(kGroup);
  app.add_option("--ms", f.ms, "M values (micro-batches); each must divide --batch-size")
      ->capture_default_str()
      ->check(cli::int_list(1, 1 << 20))
      ->group(kGroup);
  app.add_option("--checkpoints", f.checkpoints,
                 "re-materialisation modes: never,except_last,always")
      ->capture_default_str()
      ->check(cli::name_list([](const std::string& c) { parse_checkpoint(c); }))
      ->group(kGroup);
  app.add_option("--schedules", f.schedules, "schedules, or all: " + schedule_kind_names(","))
      ->capture_default_str()
      ->check(cli::name_list([](const std::string& s) {
        if (s != "all") parse_schedule_kind(s);
      }))
      ->group(kGroup);
  app.add_option("--max-measured-k", f.max_measured_k,
                 "cells with K up to this are measured (0: this machine's cores)")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, int64_t{4096}))
      ->group(kGroup);
  app.add_option("--rounds", f.rounds, "measure every measured cell in turn this many times")
      ->capture_default_str()
      ->check(cli::int_range(1, 100))
      ->group(kGroup);
  app.add_option("--measure-warmup", f.warmup, "untimed steps before each measurement")
      ->capture_default_str()
      ->check(cli::int_range(0, 100))
      ->group(kGroup);
  app.add_option("--measure-steps", f.steps, "timed steps of each measurement")
      ->capture_default_str()
      ->check(cli::int_range(1, 1000))
      ->group(kGroup);
  app.add_option("--out", f.out, "write PREFIX.md, PREFIX.csv and PREFIX.json")
      ->check(cli::output_file())
      ->group(kGroup);
  app.add_option("--cache", f.cache, "JSON file of measured layer costs to reuse and extend")
      ->check(cli::output_file())
      ->group(kGroup);
}

std::vector<ScheduleKind> chosen_schedules(const std::string& text) {
  if (text == "all") return all_schedule_kinds();
  std::vector<ScheduleKind> kinds;
  for (const auto& name : cli::parse_names(text, "--schedules"))
    kinds.push_back(parse_schedule_kind(name));
  return kinds;
}

PipelineShape make_shape(ScheduleKind kind, int64_t K, int64_t M, Checkpoint checkpoint) {
  PipelineShape shape;
  shape.K = K;
  shape.M = M;
  shape.schedule = kind;
  shape.v = default_virtual_stages(kind);
  shape.checkpoint = checkpoint;
  shape.threads = 1;
  return shape;
}

// naive-2 first, then every cell the flags ask for that the schedule and the model accept.
std::vector<PipelineShape> table_shapes(const TableFlags& f, int64_t layers, int64_t batch) {
  std::vector<PipelineShape> shapes = {make_shape(ScheduleKind::kGPipe, 2, 1, Checkpoint::kNever)};
  const auto ks = cli::parse_ints(f.ks, "--ks"), ms = cli::parse_ints(f.ms, "--ms");
  GPIPE_CHECK(ks.size() <= kMaxListed && ms.size() <= kMaxListed, ConfigError, "--ks ", f.ks,
              " and --ms ", f.ms, ": at most ", kMaxListed, " values each");
  for (int64_t K : ks) {
    for (int64_t M : ms) {
      GPIPE_CHECK(batch % M == 0, ConfigError, "--ms ", f.ms, ": M=", M,
                  " does not divide --batch-size ", batch);
      for (auto kind : chosen_schedules(f.schedules)) {
        const int64_t v = default_virtual_stages(kind);
        if (K * v > layers || !schedule_shape_error(kind, K, M, v).empty()) continue;
        GPIPE_CHECK(K * v * M <= kMaxStageChunks, ConfigError, "K=", K, " x v=", v, " x M=", M,
                    " stage micro-batches is more than the table simulates (", kMaxStageChunks,
                    ")");
        for (const auto& name : cli::parse_names(f.checkpoints, "--checkpoints")) {
          const auto checkpoint = parse_checkpoint(name);
          if (M == 1 && checkpoint == Checkpoint::kExceptLast) continue;  // that is `never`
          auto shape = make_shape(kind, K, M, checkpoint);
          if (shape.describe() != shapes.front().describe()) shapes.push_back(shape);
        }
      }
    }
  }
  return shapes;
}

// Every measured cell in turn, `rounds` times; then each one's breakdown from its last round.
void measure_cells(std::vector<Cell>& cells, plan::CostBook& book,
                   const models::ModelBuilder& builder, const models::SampleBatch& batch,
                   const TableFlags& f) {
  std::vector<Cell*> measured;
  for (auto& c : cells) {
    if (c.measured) measured.push_back(&c);
  }
  std::map<Cell*, costs::TrainingMeasurement> last;
  for (int round = 1; round <= f.rounds; ++round) {
    for (size_t i = 0; i < measured.size(); ++i) {
      Cell& c = *measured[i];
      spdlog::info("measuring, round {} of {}, cell {} of {}: {}", round, f.rounds, i + 1,
                   measured.size(), c.plan.shape.describe());
      auto m = costs::measure_training(builder, batch, c.plan.shape, book.optimizer(), f.warmup,
                                       f.steps, book.seed());
      plan::add_measurement(c.plan, m.step_ms, m.peak_bytes);
      last[&c] = std::move(m);
    }
  }
  for (Cell* c : measured) {
    const auto& m = last.at(c);
    c->breakdown =
        tables::measured_breakdown(m.last_step_events, *c->plan.measured_step_ms, c->breakdown);
    c->losses = m.losses;
  }
}

// Each measured cell's largest loss difference from the same model on one device at its M.
void compare_losses(std::vector<Cell>& cells, plan::CostBook& book,
                    const models::ModelBuilder& builder, const models::SampleBatch& batch,
                    const TableFlags& f) {
  std::map<int64_t, std::vector<double>> one_device;  // M -> losses
  for (auto& c : cells) {
    if (!c.measured) continue;
    const int64_t M = c.plan.shape.M;
    if (one_device.count(M) == 0) {
      auto shape = make_shape(ScheduleKind::kGPipe, 1, M, Checkpoint::kNever);
      shape.balance = Balance::per_device({book.num_layers()});
      shape.precision = book.precision();
      one_device[M] = costs::measure_training(builder, batch, shape, book.optimizer(), f.warmup,
                                              f.steps, book.seed())
                          .losses;
    }
    double worst = 0;
    for (size_t i = 0; i < c.losses.size(); ++i)
      worst = std::max(worst, std::abs(c.losses[i] - one_device[M].at(i)));
    c.loss_difference = worst;
  }
}

// Predicts every shape; measures the ones whose K fits; normalises each to its naive-2.
ScheduleTable make_table(const train::TrainOptions& options, const TableFlags& f) {
  auto request = train::plan_request(options);
  request.max_replicas = 1;
  auto book = train::cost_book(options, request, f.cache);
  const int64_t max_measured = f.max_measured_k > 0 ? f.max_measured_k : request.cores;
  ScheduleTable table;
  table.model = options.model.name();
  table.batch = request.batch;
  table.rounds = f.rounds;
  const auto shapes = table_shapes(f, book.num_layers(), request.batch);
  // A measured cell is predicted from its own schedule family's and mode's calibration, measured
  // in as many interleaved rounds as the cells are; a simulated cell (K past the devices) keeps
  // its shape's fused `never` one, measured once (plan::predict).
  // (Cells that share a key share its rounds: measure_in_rounds measures each key once a round.)
  std::vector<costs::CalibrationKey> keys;
  for (const auto& shape : shapes) {
    if (shape.K <= max_measured) keys.push_back(plan::calibration_key(book, request, shape));
  }
  book.calibrate_in_rounds(keys, f.rounds);
  for (const auto& shape : shapes) {
    Cell c;
    c.plan = plan::predict(book, request, shape);
    c.breakdown = tables::breakdown_of(c.plan.shape, plan::explain(book, request, c.plan));
    c.measured = shape.K <= max_measured;
    table.cells.push_back(std::move(c));
  }
  // One model and one batch for every measurement, as plan::verify builds them.
  const auto builder = models::make_model(book.model());
  const auto batch = builder->sample_batch(request.batch, book.seed() + 1);
  measure_cells(table.cells, book, *builder, batch, f);
  compare_losses(table.cells, book, *builder, batch, f);
  const Cell& base = table.cells.front();
  for (auto& c : table.cells) {
    c.speedup = c.measured && base.measured ? *base.plan.measured_step_ms / *c.plan.measured_step_ms
                                            : base.plan.step_ms / c.plan.step_ms;
  }
  return table;
}

double step_ms(const Cell& c) {
  return c.measured ? *c.plan.measured_step_ms : c.plan.step_ms;
}

std::string range_of(const Cell& c) {
  if (!c.measured) return "-";
  const auto& r = c.plan.measured_round_ms;
  return c10::str(fixed(*std::min_element(r.begin(), r.end()), 1), "-",
                  fixed(*std::max_element(r.begin(), r.end()), 1));
}

// Per device: the largest peak any round measured, or the predicted one.
std::vector<int64_t> peak_bytes(const Cell& c) {
  if (c.measured) return c.plan.measured_peak_bytes;
  return {c.plan.peak_bytes.begin(), c.plan.peak_bytes.end()};
}

int64_t max_peak(const Cell& c) {
  const auto peaks = peak_bytes(c);
  return peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
}

nlohmann::json to_json(const Cell& c) {
  const auto& s = c.plan.shape;
  const auto& b = c.breakdown;
  return {{"schedule", s.schedule_name()},
          {"K", s.K},
          {"M", s.M},
          {"v", s.virtual_stages()},
          {"checkpoint", to_string(s.checkpoint)},
          {"source", c.measured ? "measured" : "simulated"},
          {"step_ms", step_ms(c)},
          {"round_ms", c.plan.measured_round_ms},
          {"predicted_step_ms", c.plan.step_ms},
          {"speedup_over_naive2", c.speedup ? nlohmann::json(*c.speedup) : nlohmann::json()},
          {"work", b.forward + b.backward + b.optimizer},
          {"idle_bubble", b.bubble},
          {"communication", b.communication},
          {"recompute", b.recompute},
          {"imbalance", b.imbalance},
          {"peak_bytes_per_device", peak_bytes(c)},
          {"stage_balance", s.stage_balance()},
          {"max_loss_difference",
           c.loss_difference ? nlohmann::json(*c.loss_difference) : nlohmann::json()}};
}

nlohmann::json to_json(const ScheduleTable& t) {
  auto rows = nlohmann::json::array();
  for (const auto& c : t.cells)
    rows.push_back(to_json(c));
  return {{"model", t.model},     {"batch_size", t.batch}, {"rounds", t.rounds},
          {"command", t.command}, {"seconds", t.seconds},  {"rows", rows}};
}

std::string scientific(double x) {
  std::ostringstream out;
  out.precision(1);
  out << std::scientific << x;
  return out.str();
}

std::vector<std::string> row_cells(const Cell& c) {
  const auto& s = c.plan.shape;
  const auto& b = c.breakdown;
  const auto pct = [](double x) { return fixed(100 * x, 1); };
  return {s.schedule_name(),
          std::to_string(s.K),
          std::to_string(s.M),
          to_string(s.checkpoint),
          c.measured ? "measured" : "simulated",
          fixed(step_ms(c), 1),
          range_of(c),
          c.speedup ? fixed(*c.speedup, 3) : "-",
          pct(b.bubble),
          pct(b.communication),
          pct(b.recompute),
          pct(b.imbalance),
          format_bytes(static_cast<double>(max_peak(c))),
          c.loss_difference ? scientific(*c.loss_difference) : "-"};
}

const std::vector<std::string> kColumns = {"schedule",
                                           "K",
                                           "M",
                                           "re-materialisation",
                                           "source",
                                           "step ms",
                                           "rounds ms",
                                           "speedup over naive-2",
                                           "idle (bubble) %",
                                           "communication %",
                                           "recompute %",
                                           "imbalance %",
                                           "peak per device",
                                           "max loss difference"};

std::string to_markdown(const ScheduleTable& t) {
  std::ostringstream out;
  out << "# Schedules against naive-2: " << t.model << ", batch " << t.batch << "\n\n"
      << "Made by `" << t.command << "` in " << fixed(t.seconds, 0) << " s. Measured rows: CPU "
      << "virtual devices, one thread each, the median step of " << t.rounds
      << " interleaved rounds (range: each round's median). Simulated rows: the simulator over "
         "the measured layer costs. Speedup over naive-2 (K=2, M=1, gpipe) of the same source. "
         "The percentages are shares of the step's device-time (K x step) (tables/breakdown.h): "
         "idle in the schedule's bubble, waiting on communication, re-running checkpointed "
         "forwards, and idle for the imbalance between stages; the rest is forward, backward "
         "and the update. Loss "
         "difference: largest over the steps run, against the same model on one device at the "
         "same M (float summation order alone gives 1e-7; the optimizer's steps amplify it, "
         "the more the larger the learning rate).\n\n";
  TextTable table(kColumns);
  for (const auto& c : t.cells)
    table.add_row(row_cells(c));
  out << table.markdown();
  return out.str();
}

std::string to_csv(const ScheduleTable& t) {
  TextTable table(kColumns);
  for (const auto& c : t.cells)
    table.add_row(row_cells(c));
  return table.csv();
}

// The trainer's shape flags on the command line (a preset's are ignored): the table sets each
// cell's shape itself.
void refuse_shape_flags(int argc, char** argv) {
  const std::set<std::string> shape = {"--partitions", "-K",    "--balance",  "--stage-balance",
                                       "--chunks",     "-M",    "--schedule", "--virtual-stages",
                                       "--checkpoint", "--plan"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto flag = arg.substr(0, arg.find('='));
    GPIPE_CHECK(shape.count(flag) == 0, ConfigError, flag,
                " is not for schedule_table, which sets each cell's shape itself: use --ks, "
                "--ms, --schedules and --checkpoints");
  }
}

int run(const train::TrainOptions& options, const TableFlags& f, int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  refuse_shape_flags(argc, argv);
  train::check_train_options(options);
  train::check_fits_host(*models::make_model(options.model), options);
  auto table = make_table(options, f);
  table.command = cli::command_line(argc, argv);
  table.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  publish(table, f.out, "");
  return cli::kExitOk;
}

}  // namespace
}  // namespace gpipe

int main(int argc, char** argv) {
  CLI::App app{
      "schedule_table: every schedule x K x M x re-materialisation of one model, measured where "
      "K fits this machine and simulated elsewhere, against naive-2"};
  app.set_config("--config", "", "TOML file of gpipe_train flags");
  app.allow_config_extras(false);
  app.add_option("--preset", "a preset of experiments/presets (its .toml name)")->group("Presets");
  gpipe::train::TrainOptions options;
  gpipe::train::add_train_flags(app, options);
  gpipe::TableFlags flags;
  gpipe::add_table_flags(app, flags);
  return gpipe::train::run_with_presets(app, argc, argv,
                                        [&] { return gpipe::run(options, flags, argc, argv); });
}
