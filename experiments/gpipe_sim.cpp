// gpipe_sim: predicts a pipeline step from costs by discrete-event simulation.
//
//   gpipe_sim --partitions 4 --chunks 8 --schedule gpipe            # uniform costs: bubble 3/11
//   gpipe_sim --partitions 2 --chunks 8 --forward-costs 8,9 --backward-costs 16,18
//   gpipe_sim --layer-costs 4,4,4,4,4,4,4,4 --partitions 4 --balance-by cost --chunks 8
//
// Costs are milliseconds per micro-batch. The JSON has step_time (ms), bubble_fraction,
// peak_inflight_per_stage, balance, max_stage_cost and the per-stage busy time; --trace writes
// the simulated timeline as Chrome trace JSON, to compare with a measured one.
#include <spdlog/spdlog.h>

#include <iostream>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/partition.h"
#include "gpipe/simulator.h"

int main(int argc, char** argv) {
  using namespace gpipe;
  CLI::App app{"gpipe_sim: discrete-event simulation of a GPipe or 1F1B step from costs"};
  int64_t partitions = 0;
  int64_t chunks = 8;
  std::string schedule_name = "gpipe", checkpoint_name = "never";
  std::string forward, backward, recompute, layer_costs, layer_backward, balance_text, balance_by;
  std::string link_name = "none", boundary_bytes, json_path, trace_path;
  double latency_us = -1, bandwidth_gbs = -1;
  app.add_option("--partitions,-K", partitions, "number of stages K (default 4, or from costs)");
  app.add_option("--chunks,-M", chunks, "micro-batches per mini-batch M")->capture_default_str();
  app.add_option("--schedule", schedule_name, "gpipe | 1f1b")->capture_default_str();
  app.add_option("--checkpoint", checkpoint_name,
                 "always | except_last | never: which micro-batches recompute before backward")
      ->capture_default_str();
  app.add_option("--forward-costs", forward, "per-stage forward ms per micro-batch (default 1)");
  app.add_option("--backward-costs", backward, "per-stage backward ms (default 2 x forward)");
  app.add_option("--recompute-costs", recompute, "per-stage recompute ms (default = forward)");
  app.add_option("--layer-costs", layer_costs,
                 "per-layer forward ms; stages sum them under --balance or --balance-by cost");
  app.add_option("--layer-backward-costs", layer_backward,
                 "per-layer backward ms (default 2 x layer forward)");
  app.add_option("--balance", balance_text, "layers per stage, e.g. 3,3,2");
  app.add_option("--balance-by", balance_by, "cost: exact min-max partition of the layer costs");
  app.add_option("--link", link_name, "copy between stages: none | pcie | nvlink | tpu")
      ->capture_default_str();
  app.add_option("--link-latency-us", latency_us, "override the link's latency per message (us)");
  app.add_option("--link-bandwidth-gbs", bandwidth_gbs, "override the link's bandwidth (GB/s)");
  app.add_option("--boundary-bytes", boundary_bytes, "bytes crossing each of the K-1 boundaries");
  app.add_option("--json", json_path, "write the result as JSON");
  app.add_option("--trace", trace_path, "write the simulated timeline as Chrome trace JSON");

  return cli::run_main(app, argc, argv, [&] {
    GPIPE_CHECK(chunks >= 1, ConfigError, "--chunks must be >= 1, got ", chunks);
    GPIPE_CHECK(partitions >= 0, ConfigError, "--partitions must be >= 1, got ", partitions);
    const auto kind = parse_schedule_kind(schedule_name);
    const auto checkpoint = parse_checkpoint(checkpoint_name);
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
      if (!balance_text.empty()) {
        balance = cli::parse_ints(balance_text, "--balance");
        GPIPE_CHECK(partitions == 0 || partitions == static_cast<int64_t>(balance.size()),
                    ConfigError, "--balance has ", balance.size(), " stages but --partitions is ",
                    partitions);
      } else {
        GPIPE_CHECK(balance_by == "cost", ConfigError,
                    "--layer-costs needs --balance a,b,.. or --balance-by cost (got '", balance_by,
                    "')");
        std::vector<double> total;
        for (size_t i = 0; i < lf.size(); ++i)
          total.push_back(lf[i] + lb[i]);
        balance = balance_by_cost(total, partitions > 0 ? partitions : 4);
      }
      for (int64_t b : balance) {
        GPIPE_CHECK(b >= 1, ConfigError, "--balance ", balance_text, " has an empty stage");
      }
      costs.forward = sum_by_stage(lf, balance);
      costs.backward = sum_by_stage(lb, balance);
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
      GPIPE_CHECK(static_cast<int64_t>(costs.forward.size()) == K, ConfigError,
                  "--forward-costs has ", costs.forward.size(), " values but --partitions is ", K);
    }
    if (!recompute.empty()) costs.recompute = cli::parse_doubles(recompute, "--recompute-costs");
    const int64_t K = static_cast<int64_t>(costs.forward.size());
    // Link times are in seconds inside LinkModel; costs here are ms.
    const auto preset = link_preset(link_name);
    const double latency_s = latency_us >= 0 ? latency_us * 1e-6 : preset.latency_s;
    const double bandwidth = bandwidth_gbs >= 0 ? bandwidth_gbs * 1e9 : preset.bandwidth_bytes_s;
    costs.link.latency_s = latency_s * 1e3;          // ms
    costs.link.bandwidth_bytes_s = bandwidth / 1e3;  // bytes per ms
    if (!boundary_bytes.empty()) {
      costs.link.boundary_bytes = cli::parse_doubles(boundary_bytes, "--boundary-bytes");
    }
    const auto schedule = make_schedule(kind, K, chunks);
    const auto result = simulate(schedule, costs, checkpoint);
    double max_stage = 0;
    for (int64_t s = 0; s < K; ++s) {
      max_stage = std::max(max_stage, costs.forward[s] + costs.backward[s]);
    }
    auto json = to_json(result);
    json["time_unit"] = "ms";
    json["partitions"] = K;
    json["chunks"] = chunks;
    json["schedule"] = to_string(kind);
    json["checkpoint"] = to_string(checkpoint);
    json["balance"] = balance.empty() ? nlohmann::json(nullptr) : nlohmann::json(balance);
    json["max_stage_cost"] = max_stage;
    json["forward_costs"] = costs.forward;
    json["backward_costs"] = costs.backward;
    json["ideal_bubble_fraction"] =
        static_cast<double>(K - 1) / static_cast<double>(chunks + K - 1);
    std::cout << json.dump(2) << std::endl;
    if (!json_path.empty()) write_json_file(json_path, json);
    if (!trace_path.empty()) {
      Timeline timeline;
      auto trace = nlohmann::json::array();
      for (const auto& e : result.events) {
        trace.push_back({{"name", e.name},
                         {"ph", "X"},
                         {"ts", e.start_us * 1e3},  // ms -> us
                         {"dur", e.duration_us * 1e3},
                         {"pid", 0},
                         {"tid", e.stage},
                         {"args", {{"step", 0}, {"microbatch", e.microbatch}}}});
      }
      write_json_file(trace_path, {{"traceEvents", trace}, {"displayTimeUnit", "ms"}}, -1);
    }
    return cli::kExitOk;
  });
}
