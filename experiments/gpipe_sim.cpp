// gpipe_sim: predicts a pipeline step from costs by discrete-event simulation.
//
//   gpipe_sim --partitions 4 --chunks 8 --schedule gpipe            # uniform costs: bubble 3/11
//   gpipe_sim --partitions 4 --chunks 8 --schedule zbv --weight-fraction 0.5 --draw
//   gpipe_sim --partitions 2 --chunks 8 --forward-costs 8,9 --backward-costs 16,18
//   gpipe_sim --layer-costs 4,4,4,4,4,4,4,4 --partitions 4 --balance-by cost --chunks 8
//   gpipe_sim -K 4 -M 8 --schedule zb-h1 --write-schedule my.txt    # edit it, then:
//   gpipe_sim --schedule file:my.txt --draw
//   gpipe_sim -K 2 -M 8 --link pcie --boundary-bytes 4e6 --precision bf16   # 2 MB cross
//
// Costs are milliseconds per micro-batch: per device (each device's cost is shared evenly by its
// v virtual stages) or per layer (--layer-costs: each device's layers under --balance are split
// over its virtual stages; --balance-by cost cuts the layers into K*v stages). The JSON has
// step_time (ms), bubble_fraction, peak_inflight_per_device (per device, in micro-batches of all
// its layers), balance, max_stage_cost and the per-device busy time; --trace writes the simulated
// timeline as Chrome trace JSON, to compare with a measured one; --draw prints the schedule at
// unit costs, as the schedule headers draw it; --write-schedule writes its actions as a schedule
// file (schedule_file.h), which --schedule file:PATH reads back, with its K, M, v and placement.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>

#include "common/cli.h"
#include "common/report.h"
#include "common/shape_flags.h"
#include "gpipe/errors.h"
#include "gpipe/files.h"
#include "gpipe/partition.h"
#include "gpipe/pipeline.h"
#include "gpipe/simulator.h"

namespace gpipe {
namespace {

// Bounds of the sizes (docs/design.md): a lowered program of up to kMaxStageChunks stage
// micro-batches takes a few seconds and well under a GiB.
constexpr int64_t kMaxStageChunks = int64_t{1} << 20;

// The shape as the shared flags read it (common/shape_flags.h): K 0 is 4 or the costs' count, M 0
// is 8 or the schedule file's, v 0 the schedule's default.
PipelineShape default_shape() {
  PipelineShape shape;
  shape.M = 0;
  shape.checkpoint = Checkpoint::kNever;
  return shape;
}

// The command line as given; the cost lists stay text until the flags are all read.
struct SimOptions {
  PipelineShape shape = default_shape();
  double weight_fraction = 0.5;
  bool draw = false;
  std::string forward, backward, recompute, layer_costs, layer_backward, balance_by;
  std::string link_name = "none", boundary_bytes, json_path, trace_path, write_schedule_path;
  double latency_us = -1, bandwidth_gbs = -1;
};

// What is simulated: the schedule's shape and its per-virtual-stage costs in ms.
struct SimSetup {
  // K, M, v (resolved), re-materialisation and the schedule: a kind, or a file's program.
  PipelineShape shape;
  SimulationCosts costs;
};

// Declares the flags; their checks reject a bad value before anything runs.
void add_flags(CLI::App& app, SimOptions& o) {
  int64_t no_planning = 0;  // gpipe_sim takes no --devices
  add_shape_flags(app, o.shape, no_planning, "Options", ShapeFlagSet().placement(false));
  app.get_option("--partitions")
      ->description("number of devices K (0: 4, or as many as --forward-costs)")
      ->default_str("0");
  app.get_option("--chunks")
      ->description("micro-batches per mini-batch M (0: 8, or the schedule file's)")
      ->default_str("0");
  app.add_option("--write-schedule", o.write_schedule_path,
                 "write the schedule's actions as a schedule file (one line per device)")
      ->check(cli::output_file());
  app.add_option("--weight-fraction", o.weight_fraction,
                 "W's share of the backward where a schedule splits it (zb-h1, zb-h2, zbv, "
                 "dualpipev, v-half)")
      ->capture_default_str()
      ->check(cli::finite_range(0, 1));
  app.add_flag("--draw", o.draw, "print the schedule at unit costs (F = B = W = 1)");
  // Costs in ms and sizes in bytes: finite and >= 0.
  const auto costs_list = cli::parsed_by([](const std::string& text) {
    for (const double cost : cli::parse_doubles(text, ""))
      GPIPE_CHECK(cost >= 0 && cost <= 1e15, ConfigError, cost, " in '", text,
                  "' is not in [0, 1e15]");
  });
  app.add_option("--forward-costs", o.forward, "per-device forward ms per micro-batch (default 1)")
      ->check(costs_list);
  app.add_option("--backward-costs", o.backward, "per-device backward ms (default 2 x forward)")
      ->check(costs_list);
  app.add_option("--recompute-costs", o.recompute, "per-device recompute ms (default = forward)")
      ->check(costs_list);
  app.add_option("--layer-costs", o.layer_costs,
                 "per-layer forward ms; stages sum them under --balance or --balance-by cost")
      ->check(costs_list);
  app.add_option("--layer-backward-costs", o.layer_backward,
                 "per-layer backward ms (default 2 x layer forward)")
      ->check(costs_list);
  app.add_option("--balance-by", o.balance_by, "cost: exact min-max partition of the layer costs")
      ->check(CLI::IsMember({"cost"}));
  app.add_option("--link", o.link_name, "copy between stages: none | pcie | nvlink | tpu")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { link_preset(name); }));
  app.add_option("--link-latency-us", o.latency_us, "override the link's latency per message (us)")
      ->check(cli::finite_range(0, 1e12));
  app.add_option("--link-bandwidth-gbs", o.bandwidth_gbs, "override the link's bandwidth (GB/s)")
      ->check(cli::finite_range(1e-9, 1e12));
  app.add_option("--boundary-bytes", o.boundary_bytes,
                 "bytes crossing each of the K*v-1 boundaries between virtual stages")
      ->check(costs_list);
  cli::add_precision_flag(app, o.shape.precision,
                          "the precision the step computes in: --boundary-bytes are fp32 bytes "
                          "and cross at its element size (bf16, fp16: half); costs are as given");
  app.add_option("--json", o.json_path, "write the result as JSON")->check(cli::output_file());
  app.add_option("--trace", o.trace_path, "write the simulated timeline as Chrome trace JSON")
      ->check(cli::output_file());
}

// Per-layer backward ms: --layer-backward-costs, or twice each layer's forward.
std::vector<double> layer_backward_costs(const SimOptions& o, const std::vector<double>& lf) {
  std::vector<double> lb;
  if (!o.layer_backward.empty()) {
    lb = cli::parse_doubles(o.layer_backward, "--layer-backward-costs");
    GPIPE_CHECK(lb.size() == lf.size(), ConfigError, "--layer-backward-costs has ", lb.size(),
                " values but --layer-costs has ", lf.size());
  } else {
    for (double c : lf)
      lb.push_back(2 * c);
  }
  return lb;
}

// Cuts the layers into K*v virtual stages and returns each one's layers: --balance gives each
// device's layers, which the layout splits over its virtual stages; --stage-balance gives each
// virtual stage's; --balance-by cost solves the exact min-max cut of the layers' forward+backward
// (and becomes the shape's balance, per virtual stage).
std::vector<int64_t> cut_layers(const SimOptions& o, SimSetup& setup, const std::vector<double>& lf,
                                const std::vector<double>& lb) {
  const int64_t v = setup.shape.v, K = o.shape.K;
  const auto& given = o.shape.balance;
  std::vector<int64_t> stages;
  if (given.per_stage()) {
    devices_of_stage_balance(given.layers, K, v);
    stages = given.layers;
  } else if (!given.empty()) {
    GPIPE_CHECK(K == 0 || K == static_cast<int64_t>(given.layers.size()), ConfigError,
                given.describe(), " has ", given.layers.size(), " devices but --partitions is ", K);
    const auto layout = make_layout(PipelineOptions(given.layers)
                                        .schedule(setup.shape.schedule)
                                        .program(setup.shape.program)
                                        .virtual_stages(v),
                                    static_cast<int64_t>(lf.size()));
    stages = layout.stage_balance;
  } else {
    GPIPE_CHECK(o.balance_by == "cost", ConfigError,
                "--layer-costs needs --balance a,b,.., --stage-balance or --balance-by cost (got '",
                o.balance_by, "')");
    std::vector<double> total;
    for (size_t i = 0; i < lf.size(); ++i)
      total.push_back(lf[i] + lb[i]);
    stages = balance_by_cost(total, (K > 0 ? K : 4) * v);
    setup.shape.balance = Balance::per_stage(stages);
  }
  for (int64_t b : stages) {
    GPIPE_CHECK(b >= 1, ConfigError, setup.shape.balance.describe(), " has an empty stage");
  }
  return stages;
}

// Stage costs from --layer-costs: each virtual stage sums its layers' costs.
void set_layer_costs(const SimOptions& o, SimSetup& setup) {
  GPIPE_CHECK(o.forward.empty() && o.backward.empty(), ConfigError,
              "give either --layer-costs or --forward-costs/--backward-costs, not both");
  const auto lf = cli::parse_doubles(o.layer_costs, "--layer-costs");
  const auto lb = layer_backward_costs(o, lf);
  const auto stages = cut_layers(o, setup, lf, lb);
  setup.costs.forward = sum_by_stage(lf, stages);
  setup.costs.backward = sum_by_stage(lb, stages);
  setup.shape.K = o.shape.K != 0 ? o.shape.K : static_cast<int64_t>(stages.size()) / setup.shape.v;
}

// Stage costs from --forward-costs/--backward-costs: one per device, default 1 and 2 x forward.
void set_device_costs(const SimOptions& o, SimSetup& setup) {
  GPIPE_CHECK(o.shape.balance.empty() && o.balance_by.empty(), ConfigError,
              "--balance, --stage-balance and --balance-by need --layer-costs");
  SimulationCosts device;
  int64_t K = o.shape.K;
  if (!o.forward.empty()) device.forward = cli::parse_doubles(o.forward, "--forward-costs");
  if (K == 0) K = device.forward.empty() ? 4 : static_cast<int64_t>(device.forward.size());
  if (device.forward.empty()) device.forward.assign(K, 1.0);
  if (!o.backward.empty()) {
    device.backward = cli::parse_doubles(o.backward, "--backward-costs");
  } else {
    for (double f : device.forward)
      device.backward.push_back(2 * f);
  }
  GPIPE_CHECK(static_cast<int64_t>(device.forward.size()) == K &&
                  static_cast<int64_t>(device.backward.size()) == K,
              ConfigError, "--forward-costs and --backward-costs have ", device.forward.size(),
              " and ", device.backward.size(), " values but --partitions is ", K);
  // Each device's cost shared evenly by its virtual stages.
  const int64_t v = setup.shape.v;
  setup.shape.K = K;
  const auto stage_device = setup.shape.placement();
  for (int64_t s = 0; s < K * v; ++s) {
    const int64_t d = stage_device[s];
    setup.costs.forward.push_back(device.forward[d] / static_cast<double>(v));
    setup.costs.backward.push_back(device.backward[d] / static_cast<double>(v));
  }
}

// The copy between stages in ms: --link's preset with the flags' overrides and boundary sizes,
// these given in fp32 and sent in --precision's element size.
LinkModel link_costs(const SimOptions& o) {
  // The preset and the flags are in seconds; costs here are ms.
  auto link = link_preset(o.link_name);
  if (o.latency_us >= 0) link.latency = o.latency_us * 1e-6;
  if (o.bandwidth_gbs >= 0) link.bandwidth = o.bandwidth_gbs * 1e9;
  auto link_ms = link.in_milliseconds();
  if (!o.boundary_bytes.empty()) {
    link_ms.boundary_bytes = cli::parse_doubles(o.boundary_bytes, "--boundary-bytes");
    const double scale = static_cast<double>(element_bytes(o.shape.precision)) /
                         static_cast<double>(element_bytes(Precision::kFp32));
    for (auto& bytes : link_ms.boundary_bytes)
      bytes *= scale;
  }
  return link_ms;
}

// Checks the flags together and turns them into the schedule's shape and stage costs.
SimSetup make_setup(const SimOptions& o) {
  SimSetup setup;
  setup.shape = o.shape;
  auto& shape = setup.shape;
  if (const auto& p = shape.program) {  // the file's shape is the run's
    // The flags' reading took the file's K and v where none was given; M 0 takes the file's.
    GPIPE_CHECK(shape.K == p->devices && (shape.M == 0 || shape.M == p->microbatches) &&
                    shape.v == p->virtual_stages,
                ConfigError, "-K ", shape.K, " -M ", shape.M, " --virtual-stages ", shape.v,
                " disagree with ", shape.schedule_name(), " (K=", p->devices,
                " M=", p->microbatches, " v=", p->virtual_stages, "): leave them out");
    shape.M = p->microbatches;
  }
  if (shape.M == 0) shape.M = 8;
  if (shape.v == 0) shape.v = default_virtual_stages(shape.schedule);
  // The lowered program holds about three actions per (stage, micro-batch): bound its size.
  GPIPE_CHECK((shape.K > 0 ? shape.K : 4) * shape.v * shape.M <= kMaxStageChunks, ConfigError,
              "-K ", shape.K, " x --virtual-stages ", shape.v, " x -M ", shape.M,
              " stage micro-batches is more than the simulator takes (", kMaxStageChunks, ")");
  if (!o.layer_costs.empty()) {
    set_layer_costs(o, setup);
  } else {
    set_device_costs(o, setup);
  }
  if (!o.recompute.empty()) {
    setup.costs.recompute = cli::parse_doubles(o.recompute, "--recompute-costs");
  }
  setup.costs.weight_fraction = o.weight_fraction;
  setup.costs.link = link_costs(o);
  return setup;
}

// bubble_formula (simulator.h) at the mean device's costs: what the schedule's paper or
// construction predicts for equal devices, beside the simulated bubble; null where none.
nlohmann::json formula_json(const SimSetup& setup, const Schedule& schedule) {
  const auto& costs = setup.costs;
  const auto mean = [&](const std::vector<double>& per_stage) {
    double total = 0;
    for (double c : per_stage)
      total += c;
    return total / static_cast<double>(setup.shape.K);
  };
  const double F = mean(costs.forward), backward = mean(costs.backward);
  const double W = schedule.splits_backward() ? costs.weight_fraction * backward : 0;
  const auto formula = bubble_formula(setup.shape.schedule, setup.shape.K, setup.shape.M,
                                      setup.shape.v, F, backward - W, W);
  return formula ? nlohmann::json(*formula) : nlohmann::json(nullptr);
}

// The simulator's result with the setup that produced it, as the JSON output has it.
nlohmann::json result_json(const SimSetup& setup, const Schedule& schedule,
                           const SimulationResult& result) {
  const auto& costs = setup.costs;
  const int64_t K = setup.shape.K;
  const int64_t S = static_cast<int64_t>(costs.forward.size());
  std::vector<double> stage_cost;
  for (int64_t s = 0; s < S; ++s)
    stage_cost.push_back(costs.forward[s] + costs.backward[s]);
  const auto device_cost = sum_per_device(setup.shape.placement(), K, stage_cost);
  const double max_stage = *std::max_element(device_cost.begin(), device_cost.end());
  auto json = to_json(result);
  json["time_unit"] = "ms";
  json["partitions"] = K;
  json["chunks"] = setup.shape.M;
  json["schedule"] = setup.shape.schedule_name();
  json["virtual_stages"] = setup.shape.v;
  json["weight_fraction"] = costs.weight_fraction;
  json["checkpoint"] = to_string(setup.shape.checkpoint);
  json["precision"] = to_string(setup.shape.precision);
  const auto& balance = setup.shape.balance.layers;
  json["balance"] = balance.empty() ? nlohmann::json(nullptr) : nlohmann::json(balance);
  json["max_stage_cost"] = max_stage;
  json["forward_costs"] = costs.forward;
  json["backward_costs"] = costs.backward;
  json["ideal_bubble_fraction"] =
      static_cast<double>(K - 1) / static_cast<double>(setup.shape.M + K - 1);
  json["bubble_formula"] = formula_json(setup, schedule);
  return json;
}

// The simulated timeline as Chrome trace JSON, to compare with a measured one.
nlohmann::json trace_json(const SimulationResult& result) {
  auto trace = nlohmann::json::array();
  for (const auto& e : result.events) {
    trace.push_back(
        {{"name", e.name},
         {"ph", "X"},
         {"ts", e.start * 1e3},  // ms -> us
         {"dur", e.duration * 1e3},
         {"pid", 0},
         {"tid", e.device},
         {"args",
          {{"step", 0}, {"microbatch", e.microbatch}, {"virtual_stage", e.virtual_stage}}}});
  }
  return {{"traceEvents", trace}, {"displayTimeUnit", "ms"}};
}

// Simulates the step and reports it: the drawing on stderr (--draw), the JSON on stdout and in
// --json, the timeline in --trace.
int run_simulation(const SimOptions& o) {
  check_distinct_outputs({{"--json", o.json_path},
                          {"--trace", o.trace_path},
                          {"--write-schedule", o.write_schedule_path}});
  const auto setup = make_setup(o);
  const auto schedule = setup.shape.training_schedule();
  if (!o.write_schedule_path.empty())
    write_text_file(o.write_schedule_path, write_schedule(schedule));
  const auto result = simulate(schedule, setup.costs, setup.shape.checkpoint);
  auto json = result_json(setup, schedule, result);
  if (o.draw) {
    const auto rows = draw_schedule(schedule, setup.shape.checkpoint);
    json["drawing"] = rows;
    for (const auto& row : rows)
      std::cerr << row << "\n";
  }
  std::cout << json.dump(2) << std::endl;
  if (!o.json_path.empty()) write_json_file(o.json_path, json);
  if (!o.trace_path.empty()) write_json_file(o.trace_path, trace_json(result), -1);
  return cli::kExitOk;
}

}  // namespace
}  // namespace gpipe

int main(int argc, char** argv) {
  CLI::App app{"gpipe_sim: discrete-event simulation of a pipeline step from costs"};
  gpipe::SimOptions options;
  gpipe::add_flags(app, options);
  return gpipe::cli::run_main(app, argc, argv, [&] { return gpipe::run_simulation(options); });
}
