// gpipe_sim: predicts a pipeline step from costs by discrete-event simulation.
//
//   gpipe_sim --partitions 4 --chunks 8 --schedule gpipe            # uniform costs: bubble 3/11
//   gpipe_sim --partitions 4 --chunks 8 --schedule zbv --weight-fraction 0.5 --draw
//   gpipe_sim --partitions 2 --chunks 8 --forward-costs 8,9 --backward-costs 16,18
//   gpipe_sim --layer-costs 4,4,4,4,4,4,4,4 --partitions 4 --balance-by cost --chunks 8
//
// Costs are milliseconds per micro-batch: per device (each device's cost is shared evenly by its
// v virtual stages) or per layer (--layer-costs: each device's layers under --balance are split
// over its virtual stages; --balance-by cost cuts the layers into K*v stages). The JSON has
// step_time (ms), bubble_fraction, peak_inflight_per_stage (per device, in micro-batches of all
// its layers), balance, max_stage_cost and the per-device busy time; --trace writes the simulated
// timeline as Chrome trace JSON, to compare with a measured one; --draw prints the schedule at
// unit costs, as the schedule headers draw it.
#include <spdlog/spdlog.h>

#include <iostream>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/partition.h"
#include "gpipe/pipeline.h"
#include "gpipe/simulator.h"

// Bounds of the sizes (docs/design.md): a lowered program of up to kMaxStageChunks stage
// micro-batches takes a few seconds and well under a GiB.
constexpr int64_t kMaxStages = 4096;
constexpr int64_t kMaxChunks = int64_t{1} << 20;
constexpr int64_t kMaxVirtualStages = 64;
constexpr int64_t kMaxStageChunks = int64_t{1} << 20;

int main(int argc, char** argv) {
  using namespace gpipe;
  CLI::App app{"gpipe_sim: discrete-event simulation of a pipeline step from costs"};
  int64_t partitions = 0;
  int64_t chunks = 8;
  int64_t virtual_stages = 0;
  double weight_fraction = 0.5;
  bool draw = false;
  std::string schedule_name = "gpipe", checkpoint_name = "never";
  std::string forward, backward, recompute, layer_costs, layer_backward, balance_text, balance_by;
  std::string link_name = "none", boundary_bytes, json_path, trace_path;
  double latency_us = -1, bandwidth_gbs = -1;
  app.add_option("--partitions,-K", partitions, "number of stages K (default 4, or from costs)")
      ->check(CLI::Range(int64_t{1}, kMaxStages));
  app.add_option("--chunks,-M", chunks, "micro-batches per mini-batch M")
      ->check(CLI::Range(int64_t{1}, kMaxChunks))
      ->capture_default_str();
  app.add_option("--schedule", schedule_name, "gpipe | 1f1b | interleaved-1f1b | zb-h1 | zbv")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { parse_schedule_kind(name); }));
  app.add_option("--virtual-stages", virtual_stages,
                 "v stages per device (interleaved-1f1b: default 2; zbv: 2)")
      ->check(CLI::Range(int64_t{1}, kMaxVirtualStages));
  app.add_option("--weight-fraction", weight_fraction,
                 "W's share of the backward where a schedule splits it (zb-h1, zbv)")
      ->capture_default_str()
      ->check(cli::finite_range(0, 1));
  app.add_flag("--draw", draw, "print the schedule at unit costs (F = B = W = 1)");
  app.add_option("--checkpoint", checkpoint_name,
                 "always | except_last | never: which micro-batches recompute before backward")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { parse_checkpoint(name); }));
  // Costs in ms and sizes in bytes: finite and >= 0.
  const auto costs_list = cli::parsed_by([](const std::string& text) {
    for (const double cost : cli::parse_doubles(text, ""))
      GPIPE_CHECK(cost >= 0 && cost <= 1e15, ConfigError, cost, " in '", text,
                  "' is not in [0, 1e15]");
  });
  app.add_option("--forward-costs", forward, "per-stage forward ms per micro-batch (default 1)")
      ->check(costs_list);
  app.add_option("--backward-costs", backward, "per-stage backward ms (default 2 x forward)")
      ->check(costs_list);
  app.add_option("--recompute-costs", recompute, "per-stage recompute ms (default = forward)")
      ->check(costs_list);
  app.add_option("--layer-costs", layer_costs,
                 "per-layer forward ms; stages sum them under --balance or --balance-by cost")
      ->check(costs_list);
  app.add_option("--layer-backward-costs", layer_backward,
                 "per-layer backward ms (default 2 x layer forward)")
      ->check(costs_list);
  app.add_option("--balance", balance_text, "layers per stage, e.g. 3,3,2")
      ->check(cli::int_list(1, int64_t{1} << 20));
  app.add_option("--balance-by", balance_by, "cost: exact min-max partition of the layer costs")
      ->check(CLI::IsMember({"cost"}));
  app.add_option("--link", link_name, "copy between stages: none | pcie | nvlink | tpu")
      ->capture_default_str()
      ->check(cli::parsed_by([](const std::string& name) { link_preset(name); }));
  app.add_option("--link-latency-us", latency_us, "override the link's latency per message (us)")
      ->check(cli::finite_range(0, 1e12));
  app.add_option("--link-bandwidth-gbs", bandwidth_gbs, "override the link's bandwidth (GB/s)")
      ->check(cli::finite_range(1e-9, 1e12));
  app.add_option("--boundary-bytes", boundary_bytes,
                 "bytes crossing each of the K*v-1 boundaries between virtual stages")
      ->check(costs_list);
  app.add_option("--json", json_path, "write the result as JSON")->check(cli::output_file());
  app.add_option("--trace", trace_path, "write the simulated timeline as Chrome trace JSON")
      ->check(cli::output_file());

  return cli::run_main(app, argc, argv, [&] {
    GPIPE_CHECK(chunks >= 1, ConfigError, "--chunks must be >= 1, got ", chunks);
    GPIPE_CHECK(partitions >= 0, ConfigError, "--partitions must be >= 1, got ", partitions);
    const auto kind = parse_schedule_kind(schedule_name);
    const auto checkpoint = parse_checkpoint(checkpoint_name);
    const int64_t v = virtual_stages > 0 ? virtual_stages : default_virtual_stages(kind);
    // The lowered program holds about three actions per (stage, micro-batch): bound its size.
    GPIPE_CHECK((partitions > 0 ? partitions : 4) * v * chunks <= kMaxStageChunks, ConfigError,
                "-K ", partitions, " x --virtual-stages ", v, " x -M ", chunks,
                " stage micro-batches is more than the simulator takes (", kMaxStageChunks, ")");
    GPIPE_CHECK(virtual_stages >= 0, ConfigError, "--virtual-stages must be >= 1, got ",
                virtual_stages);
    SimulationCosts costs;
    std::vector<int64_t> balance;
    if (!layer_costs.empty()) {
      GPIPE_CHECK(forward.empty() && backward.empty(), ConfigError,
                  "give either --layer-costs or --forward-costs/--backward-costs, not both");
      const auto lf = cli::parse_doubles(layer_costs, "--layer-costs");
      std::vector<double> lb;
      if (!layer_backward.empty()) {
        lb = cli::parse_doubles(layer_backward, "--layer-backward-costs");
        GPIPE_CHECK(lb.size() == lf.size(), ConfigError, "--layer-backward-costs has ", lb.size(),
                    " values but --layer-costs has ", lf.size());
      } else {
        for (double c : lf)
          lb.push_back(2 * c);
      }
      std::vector<int64_t> stage_balance;
      if (!balance_text.empty()) {
        balance = cli::parse_ints(balance_text, "--balance");
        GPIPE_CHECK(partitions == 0 || partitions == static_cast<int64_t>(balance.size()),
                    ConfigError, "--balance has ", balance.size(), " devices but --partitions is ",
                    partitions);
        const auto layout = make_layout(PipelineOptions(balance).schedule(kind).virtual_stages(v),
                                        static_cast<int64_t>(lf.size()));
        stage_balance = layout.stage_balance;
      } else {
        GPIPE_CHECK(balance_by == "cost", ConfigError,
                    "--layer-costs needs --balance a,b,.. or --balance-by cost (got '", balance_by,
                    "')");
        std::vector<double> total;
        for (size_t i = 0; i < lf.size(); ++i)
          total.push_back(lf[i] + lb[i]);
        stage_balance = balance_by_cost(total, (partitions > 0 ? partitions : 4) * v);
        balance = stage_balance;
      }
      for (int64_t b : stage_balance) {
        GPIPE_CHECK(b >= 1, ConfigError, "--balance ", balance_text, " has an empty stage");
      }
      costs.forward = sum_by_stage(lf, stage_balance);
      costs.backward = sum_by_stage(lb, stage_balance);
      if (partitions == 0) partitions = static_cast<int64_t>(stage_balance.size()) / v;
    } else {
      GPIPE_CHECK(balance_text.empty() && balance_by.empty(), ConfigError,
                  "--balance and --balance-by need --layer-costs");
      int64_t K = partitions;
      if (!forward.empty()) costs.forward = cli::parse_doubles(forward, "--forward-costs");
      if (K == 0) K = costs.forward.empty() ? 4 : static_cast<int64_t>(costs.forward.size());
      if (costs.forward.empty()) costs.forward.assign(K, 1.0);
      if (!backward.empty()) {
        costs.backward = cli::parse_doubles(backward, "--backward-costs");
      } else {
        for (double f : costs.forward)
          costs.backward.push_back(2 * f);
      }
      GPIPE_CHECK(static_cast<int64_t>(costs.forward.size()) == K &&
                      static_cast<int64_t>(costs.backward.size()) == K,
                  ConfigError, "--forward-costs and --backward-costs have ", costs.forward.size(),
                  " and ", costs.backward.size(), " values but --partitions is ", K);
      // Each device's cost shared evenly by its virtual stages.
      SimulationCosts shared;
      for (int64_t s = 0; s < K * v; ++s) {
        const int64_t d = stage_device(kind, K, v, s);
        shared.forward.push_back(costs.forward[d] / static_cast<double>(v));
        shared.backward.push_back(costs.backward[d] / static_cast<double>(v));
      }
      costs.forward = shared.forward;
      costs.backward = shared.backward;
      partitions = K;
    }
    if (!recompute.empty()) costs.recompute = cli::parse_doubles(recompute, "--recompute-costs");
    costs.weight_fraction = weight_fraction;
    const int64_t K = partitions;
    const int64_t S = static_cast<int64_t>(costs.forward.size());
    // The preset and the flags are in seconds; costs here are ms.
    auto link = link_preset(link_name);
    if (latency_us >= 0) link.latency = latency_us * 1e-6;
    if (bandwidth_gbs >= 0) link.bandwidth = bandwidth_gbs * 1e9;
    costs.link = link.in_milliseconds();
    if (!boundary_bytes.empty()) {
      costs.link.boundary_bytes = cli::parse_doubles(boundary_bytes, "--boundary-bytes");
    }
    const auto schedule = make_schedule(kind, K, chunks, v);
    const auto result = simulate(schedule, costs, checkpoint);
    std::vector<double> stage_cost;
    for (int64_t s = 0; s < S; ++s)
      stage_cost.push_back(costs.forward[s] + costs.backward[s]);
    const auto device_cost = sum_per_device(kind, K, stage_cost);
    const double max_stage = *std::max_element(device_cost.begin(), device_cost.end());
    auto json = to_json(result);
    json["time_unit"] = "ms";
    json["partitions"] = K;
    json["chunks"] = chunks;
    json["schedule"] = to_string(kind);
    json["virtual_stages"] = v;
    json["weight_fraction"] = weight_fraction;
    json["checkpoint"] = to_string(checkpoint);
    json["balance"] = balance.empty() ? nlohmann::json(nullptr) : nlohmann::json(balance);
    json["max_stage_cost"] = max_stage;
    json["forward_costs"] = costs.forward;
    json["backward_costs"] = costs.backward;
    json["ideal_bubble_fraction"] =
        static_cast<double>(K - 1) / static_cast<double>(chunks + K - 1);
    if (draw) {
      const auto rows = draw_schedule(schedule, checkpoint);
      json["drawing"] = rows;
      for (const auto& row : rows)
        std::cerr << row << "\n";
    }
    std::cout << json.dump(2) << std::endl;
    if (!json_path.empty()) write_json_file(json_path, json);
    if (!trace_path.empty()) {
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
      write_json_file(trace_path, {{"traceEvents", trace}, {"displayTimeUnit", "ms"}}, -1);
    }
    return cli::kExitOk;
  });
}
