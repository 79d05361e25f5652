// model_info: parameter count, per-layer table and pipeline balance of a model configuration.
//
// Why this tool exists: GPipe's Table 1 and Table 4 state parameter counts for AmoebaNet and
// Transformer-L configurations up to billions of parameters; this prints ours for any
// configuration without holding the model in memory (layers are built, counted and dropped one
// at a time, or counted analytically), with the balance of K partitions by parameters, or by
// profiled time or memory (which do build the whole model and run a sample micro-batch).
//
//   model_info --model amoebanet-d --layers 18 --filters 208 --classes 1000 --image-size 224
//   model_info --model transformer-l --layers 3 --d-model 2048 --ffn 8192 --heads 32
//              --vocab 32000 --seq-len 1024 --partitions 4 --json out.json   (one line)
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpipe/errors.h"
#include "gpipe/exit_codes.h"
#include "gpipe/models/model_flags.h"
#include "gpipe/partition.h"
#include "gpipe/pipeline.h"
#include "gpipe/profile.h"
#include "gpipe/timeline.h"

namespace {

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

nlohmann::json config_json(const gpipe::models::ModelConfig& c) {
  auto j = gpipe::models::to_json(c);
  j["init_seed"] = c.init_seed;
  return j;
}

// The command line's values.
struct Options {
  gpipe::models::ModelConfig config;
  int64_t partitions = 1;
  std::string balance_by = "params";
  int64_t batch = 8;
  std::string json_path;
  double paper_parameters = 0;
  bool verify_by_building = false;
};

void add_flags(CLI::App& app, Options& o) {
  using gpipe::parsed_by;
  gpipe::models::add_model_flags(app, o.config);
  app.add_option("--init-seed", o.config.init_seed, "Initialisation seed")->capture_default_str();
  app.add_option("--partitions", o.partitions, "K: pipeline stages to balance")
      ->check(gpipe::int_range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--balance-by", o.balance_by, "Balance by")
      ->check(CLI::IsMember({"params", "time", "memory"}))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Micro-batch size profiled for --balance-by time|memory")
      ->check(gpipe::int_range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--paper-parameters", o.paper_parameters,
                 "The paper's parameter count of this configuration, to compare with")
      ->check(CLI::Range(1.0, 1e15));
  app.add_flag("--verify-by-building", o.verify_by_building,
               "Also build every layer (one at a time) and check its count against the model's "
               "count (which is analytic for Transformer-L)");
  app.add_option("--json", o.json_path, "Write the results as JSON to this file")
      ->check(parsed_by([](const std::string& path) { gpipe::check_output_file(path, ""); }));
}

// Builds every layer, one at a time, and checks its count against the model's.
void verify_counts(const gpipe::models::ModelBuilder& builder, const std::vector<int64_t>& counts) {
  using namespace gpipe;
  for (int64_t i = 0; i < builder.num_layers(); ++i) {
    const int64_t built = count_parameters({builder.build_layer(i)});
    GPIPE_CHECK(built == counts[static_cast<size_t>(i)], Error, "layer ", i, " (",
                builder.layer_name(i), ") has ", built, " parameters when built but ",
                counts[static_cast<size_t>(i)], " counted");
  }
  spdlog::info("built every layer: the counts agree");
}

// Each layer's cost to balance by: its parameters, or its profiled time or memory (which builds
// the whole model and runs a micro-batch of `batch`).
std::vector<double> balance_costs(const gpipe::models::ModelBuilder& builder,
                                  const std::vector<int64_t>& counts, gpipe::BalanceBy by,
                                  int64_t batch) {
  if (by == gpipe::BalanceBy::kParams) return {counts.begin(), counts.end()};
  spdlog::info("building all {} layers to profile a micro-batch of {}", counts.size(), batch);
  const auto layers = builder.build();
  const auto sample = builder.sample_batch(batch, /*seed=*/0);
  return gpipe::layer_costs(layers, by, {sample.input});
}

// What a model's count and balance are, as JSON (the --json file, and what the log prints).
struct Counted {
  std::vector<int64_t> counts;
  std::vector<double> costs;
  std::vector<int64_t> balance;
  int64_t total = 0;
  int64_t element_bytes = 4;
  double seconds = 0;
};

nlohmann::json report(const Options& o, const gpipe::models::ModelBuilder& builder,
                      const Counted& c) {
  nlohmann::json out;
  out["model"] = builder.name();
  out["config"] = config_json(o.config);
  out["parameters"] = c.total;
  out["parameter_bytes"] = c.total * c.element_bytes;
  out["layers"] = nlohmann::json::array();
  for (size_t i = 0; i < c.counts.size(); ++i) {
    nlohmann::json layer{{"index", i},
                         {"name", builder.layer_name(static_cast<int64_t>(i))},
                         {"parameters", c.counts[i]}};
    if (o.balance_by != "params") layer["cost"] = c.costs[i];
    out["layers"].push_back(layer);
  }
  out["counted"] = builder.counts_analytically() ? "analytic" : "built layer by layer";
  out["verified_by_building"] = o.verify_by_building;
  out["partitions"] = o.partitions;
  out["balance_by"] = o.balance_by;
  out["balance"] = c.balance;
  out["stage_costs"] = gpipe::stage_costs(c.costs, c.balance);
  out["seconds"] = c.seconds;
  out["peak_rss_bytes"] = peak_rss_bytes();
  if (o.paper_parameters > 0) {
    out["paper_parameters"] = o.paper_parameters;
    out["deviation_percent"] = 100.0 * (static_cast<double>(c.total) / o.paper_parameters - 1.0);
  }
  return out;
}

void log_report(const Options& o, const gpipe::models::ModelBuilder& builder, const Counted& c,
                const nlohmann::json& out) {
  for (size_t i = 0; i < c.counts.size(); ++i) {
    spdlog::info("  {:>4} {:<16} {:>14}", i, builder.layer_name(static_cast<int64_t>(i)),
                 c.counts[i]);
  }
  spdlog::info("{}: {} layers, {} parameters ({:.1f} MiB)", builder.name(), c.counts.size(),
               c.total, static_cast<double>(c.total * c.element_bytes) / (1 << 20));
  if (o.paper_parameters > 0) {
    spdlog::info("paper: {:.0f} parameters; ours differ by {:+.2f}%", o.paper_parameters,
                 out["deviation_percent"].get<double>());
  }
  spdlog::info("balance over {} partitions by {}: {} (largest stage cost {:.4g})", o.partitions,
               o.balance_by, c10::Join(",", c.balance), gpipe::max_stage_cost(c.costs, c.balance));
  spdlog::info("took {:.2f} s, peak resident memory {:.1f} MiB", c.seconds,
               static_cast<double>(out["peak_rss_bytes"].get<int64_t>()) / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpipe;
  Options o;
  CLI::App app{"Parameter count, per-layer table and pipeline balance of a model"};
  add_flags(app, o);
  if (const auto code = gpipe::parse_command_line(app, argc, argv)) return *code;

  // Every line to stderr, errors included, as the other programs log.
  spdlog::set_default_logger(spdlog::stderr_color_mt("model_info"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  models::warn_ignored_model_flags(app, o.config);
  try {
    const auto start = std::chrono::steady_clock::now();
    const auto builder = models::make_model(o.config);
    const auto by = parse_balance_by(o.balance_by);
    GPIPE_CHECK(o.partitions <= builder->num_layers(), ConfigError, "cannot balance ",
                builder->num_layers(), " layers over ", o.partitions, " partitions");
    Counted c;
    c.counts = builder->layer_parameters();
    if (o.verify_by_building) verify_counts(*builder, c.counts);
    for (const auto count : c.counts)
      c.total += count;
    c.element_bytes = static_cast<int64_t>(
        c10::elementSize(c10::typeMetaToScalarType(torch::get_default_dtype())));
    c.costs = balance_costs(*builder, c.counts, by, o.batch);
    c.balance = balance_by_cost(c.costs, o.partitions);
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto out = report(o, *builder, c);
    log_report(o, *builder, c, out);
    if (!o.json_path.empty()) {
      std::ofstream file(o.json_path);
      GPIPE_CHECK(file.good(), ConfigError, "cannot write --json file '", o.json_path, "'");
      file << out.dump(2) << "\n";
      spdlog::info("wrote {}", o.json_path);
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", describe_exception(std::current_exception()));
    return exit_code_for(e);
  }
  return kExitOk;
}
