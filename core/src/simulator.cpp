#include "gpipe/simulator.h"

#include <algorithm>
#include <cmath>

#include "gpipe/errors.h"
#include "gpipe/partition.h"

namespace gpipe {
namespace {

void check_costs(const std::vector<double>& costs, int64_t stages, const char* what,
                 bool allow_empty) {
  if (allow_empty && costs.empty()) return;
  GPIPE_CHECK(static_cast<int64_t>(costs.size()) == stages, ConfigError, what, " costs list ",
              costs.size(), " values but the schedule has K=", stages,
              " stages; give one value per stage");
  for (size_t s = 0; s < costs.size(); ++s) {
    GPIPE_CHECK(std::isfinite(costs[s]) && costs[s] >= 0, ConfigError, what, " cost of stage ", s,
                " is ", costs[s], "; costs must be finite and >= 0");
  }
}

}  // namespace

double LinkModel::transfer_s(int64_t boundary) const {
  double bytes = 0;
  if (boundary >= 0 && boundary < static_cast<int64_t>(boundary_bytes.size())) {
    bytes = boundary_bytes[boundary];
  }
  return latency_s + (bandwidth_bytes_s > 0 ? bytes / bandwidth_bytes_s : 0.0);
}

LinkModel link_preset(const std::string& name) {
  LinkModel link;
  if (name == "pcie") {
    link.bandwidth_bytes_s = 12e9;
    link.latency_s = 10e-6;
  } else if (name == "nvlink") {
    link.bandwidth_bytes_s = 50e9;
    link.latency_s = 5e-6;
  } else if (name == "tpu") {
    link.bandwidth_bytes_s = 70e9;
    link.latency_s = 2e-6;
  } else if (name != "none") {
    throw ConfigError(c10::str("unknown link '", name, "': expected pcie, nvlink, tpu or none"));
  }
  return link;
}

SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs,
                          Checkpoint checkpoint) {
  validate_schedule(schedule);
  const int64_t K = schedule.stages;
  const int64_t M = schedule.microbatches;
  check_costs(costs.forward, K, "forward", false);
  check_costs(costs.backward, K, "backward", false);
  check_costs(costs.recompute, K, "recompute", true);
  GPIPE_CHECK(costs.link.latency_s >= 0 && costs.link.bandwidth_bytes_s >= 0, ConfigError,
              "link latency and bandwidth must be >= 0, got ", costs.link.latency_s, " and ",
              costs.link.bandwidth_bytes_s);
  GPIPE_CHECK(costs.link.boundary_bytes.empty() ||
                  static_cast<int64_t>(costs.link.boundary_bytes.size()) == K - 1,
              ConfigError, "boundary bytes list ", costs.link.boundary_bytes.size(),
              " values but K=", K, " stages have ", K - 1, " boundaries");
  const auto& recompute = costs.recompute.empty() ? costs.forward : costs.recompute;

  const double unset = -1;
  // Arrival time of micro-batch m's activations at stage s / of its gradient at stage s.
  std::vector<std::vector<double>> act_ready(K, std::vector<double>(M, unset));
  std::vector<std::vector<double>> grad_ready(K, std::vector<double>(M, unset));
  for (int64_t m = 0; m < M; ++m)
    act_ready[0][m] = 0;
  // Per boundary: when the forward / backward direction of the link is next free.
  std::vector<double> link_forward_free(std::max<int64_t>(K - 1, 0), 0);
  std::vector<double> link_backward_free(std::max<int64_t>(K - 1, 0), 0);

  SimulationResult result;
  result.busy_per_stage.assign(K, 0);
  std::vector<size_t> next(K, 0);
  std::vector<double> stage_free(K, 0);
  auto record = [&](int64_t s, const std::string& name, int64_t m, double start, double d) {
    TimelineEvent e;
    e.stage = s;
    e.name = name;
    e.microbatch = m;
    e.start_us = start;
    e.duration_us = d;
    result.events.push_back(e);
    result.busy_per_stage[s] += d;
  };
  auto checkpointed = [&](int64_t m) {
    return checkpoint == Checkpoint::kAlways ||
           (checkpoint == Checkpoint::kExceptLast && m != M - 1);
  };
  // Repeatedly run every stage's next action whose input has arrived. validate_schedule
  // guaranteed that this terminates with every action run.
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 0; s < K; ++s) {
      while (next[s] < schedule.actions[s].size()) {
        const auto& a = schedule.actions[s][next[s]];
        const int64_t m = a.microbatch;
        if (a.kind == ActionKind::kForward) {
          if (act_ready[s][m] == unset) break;
          const double start = std::max(stage_free[s], act_ready[s][m]);
          record(s, "F" + std::to_string(m), m, start, costs.forward[s]);
          stage_free[s] = start + costs.forward[s];
          if (s + 1 < K) {
            const double send = std::max(stage_free[s], link_forward_free[s]);
            const double t = costs.link.transfer_s(s);
            link_forward_free[s] = send + t;
            act_ready[s + 1][m] = send + t;
          } else {
            grad_ready[s][m] = stage_free[s];  // the loss is part of the last forward
          }
        } else {
          if (grad_ready[s][m] == unset) break;
          double start = stage_free[s];
          if (checkpointed(m)) {
            record(s, "R" + std::to_string(m), m, start, recompute[s]);
            start += recompute[s];
          }
          start = std::max(start, grad_ready[s][m]);
          record(s, "B" + std::to_string(m), m, start, costs.backward[s]);
          stage_free[s] = start + costs.backward[s];
          if (s > 0) {
            const double send = std::max(stage_free[s], link_backward_free[s - 1]);
            const double t = costs.link.transfer_s(s - 1);
            link_backward_free[s - 1] = send + t;
            grad_ready[s - 1][m] = send + t;
          }
        }
        ++next[s];
        progress = true;
      }
    }
  }
  result.step_time = *std::max_element(stage_free.begin(), stage_free.end());
  double busy = 0;
  for (double b : result.busy_per_stage)
    busy += b;
  result.bubble_fraction =
      result.step_time > 0 ? 1.0 - busy / static_cast<double>(K) / result.step_time : 0.0;
  result.peak_inflight_per_stage = peak_inflight(schedule);
  return result;
}

std::vector<double> sum_by_stage(const std::vector<double>& layer_costs,
                                 const std::vector<int64_t>& balance) {
  int64_t total = 0;
  for (int64_t b : balance)
    total += b;
  GPIPE_CHECK(total == static_cast<int64_t>(layer_costs.size()), ConfigError, "balance ",
              c10::Join(",", balance), " covers ", total, " layers but ", layer_costs.size(),
              " layer costs were given");
  return stage_costs(layer_costs, balance);
}

nlohmann::json to_json(const SimulationResult& result) {
  return {{"step_time", result.step_time},
          {"bubble_fraction", result.bubble_fraction},
          {"busy_per_stage", result.busy_per_stage},
          {"peak_inflight_per_stage", result.peak_inflight_per_stage}};
}

}  // namespace gpipe
