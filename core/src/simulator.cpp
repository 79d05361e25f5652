#include "gpipe/simulator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "gpipe/errors.h"
#include "gpipe/lowering.h"
#include "gpipe/partition.h"

namespace gpipe {
namespace {

void check_costs(const std::vector<double>& costs, int64_t stages, const char* what,
                 bool allow_empty) {
  if (allow_empty && costs.empty()) return;
  GPIPE_CHECK(static_cast<int64_t>(costs.size()) == stages, ConfigError, what, " costs list ",
              costs.size(), " values but the schedule has ", stages,
              " (virtual) stages; give one value per stage");
  for (size_t s = 0; s < costs.size(); ++s) {
    GPIPE_CHECK(std::isfinite(costs[s]) && costs[s] >= 0, ConfigError, what, " cost of stage ", s,
                " is ", costs[s], "; costs must be finite and >= 0");
  }
}

// Throws ConfigError for costs that do not fit a schedule of S (virtual) stages.
void check_simulation_costs(const SimulationCosts& costs, int64_t S) {
  check_costs(costs.forward, S, "forward", false);
  check_costs(costs.backward, S, "backward", false);
  check_costs(costs.recompute, S, "recompute", true);
  check_costs(costs.checkpointed_forward, S, "checkpointed forward", true);
  check_costs(costs.weight, S, "weight", true);
  check_costs(costs.fused_backward, S, "fused backward", true);
  GPIPE_CHECK(costs.weight_fraction >= 0 && costs.weight_fraction <= 1, ConfigError,
              "the weight fraction (W's share of the backward) must be in [0, 1], got ",
              costs.weight_fraction);
  GPIPE_CHECK(costs.link.latency >= 0 && costs.link.bandwidth >= 0, ConfigError,
              "link latency and bandwidth must be >= 0, got ", costs.link.latency, " and ",
              costs.link.bandwidth);
  GPIPE_CHECK(costs.link.boundary_bytes.empty() ||
                  static_cast<int64_t>(costs.link.boundary_bytes.size()) == S - 1,
              ConfigError, "boundary bytes list ", costs.link.boundary_bytes.size(), " values but ",
              S, " stages have ", S - 1, " boundaries");
}

// What each kind of action costs on each stage, with the defaults filled in: a recompute or a
// checkpointed forward not priced is the forward; W is its own cost or the weight fraction of
// the backward, and B is the rest when the schedule splits the backward; otherwise B is the
// backward in one pass (the fused backward where priced).
struct ActionCosts {
  std::vector<double> forward, no_grad_forward, recompute, input_grad, weight;
};

ActionCosts action_costs(const SimulationCosts& costs, int64_t S, bool split) {
  ActionCosts out;
  out.forward = costs.forward;
  out.recompute = costs.recompute.empty() ? costs.forward : costs.recompute;
  out.no_grad_forward =
      costs.checkpointed_forward.empty() ? costs.forward : costs.checkpointed_forward;
  out.weight.resize(S);
  out.input_grad.resize(S);
  for (int64_t s = 0; s < S; ++s) {
    out.weight[s] =
        costs.weight.empty() ? costs.weight_fraction * costs.backward[s] : costs.weight[s];
    GPIPE_CHECK(out.weight[s] <= costs.backward[s], ConfigError, "stage ", s, "'s W costs ",
                out.weight[s], ", more than its whole backward ", costs.backward[s]);
    const double whole = costs.fused_backward.empty() ? costs.backward[s] : costs.fused_backward[s];
    out.input_grad[s] = split ? costs.backward[s] - out.weight[s] : whole;
  }
  return out;
}

}  // namespace

SimulationResult simulate(const Schedule& input, const SimulationCosts& costs,
                          Checkpoint checkpoint) {
  const Schedule schedule = input.lowered ? input : lower(input, checkpoint);
  if (input.lowered) validate_schedule(schedule);
  const int64_t K = schedule.devices;
  const int64_t S = schedule.num_stages();
  const int64_t M = schedule.microbatches;
  check_simulation_costs(costs, S);
  const auto priced = action_costs(costs, S, schedule.splits_backward());

  const double unset = -1;
  // Arrival time of each message: [direction][sending stage][micro-batch].
  std::vector<std::vector<std::vector<double>>> arrival(
      2, std::vector<std::vector<double>>(S, std::vector<double>(M, unset)));
  std::map<std::pair<int64_t, int64_t>, double> link_free;  // (from device, to device)

  SimulationResult result;
  result.busy_per_device.assign(K, 0);
  std::vector<size_t> next(K, 0);
  std::vector<double> clock(K, 0);
  auto run = [&](int64_t d, const Action& a, const char* name, double duration) {
    SimulatedEvent e;
    e.device = d;
    e.name = name + std::to_string(a.microbatch);
    e.microbatch = a.microbatch;
    e.start = clock[d];
    e.duration = duration;
    e.virtual_stage = a.stage;
    result.events.push_back(e);
    result.busy_per_device[d] += duration;
    clock[d] += duration;
  };
  // validate_schedule proved that this loop runs every action.
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t d = 0; d < K; ++d) {
      for (; next[d] < schedule.actions[d].size(); ++next[d], progress = true) {
        const auto& a = schedule.actions[d][next[d]];
        const int64_t s = a.stage, m = a.microbatch;
        const bool backward_message =
            a.kind == ActionKind::kSendBackward || a.kind == ActionKind::kRecvBackward;
        if (a.kind == ActionKind::kRecvForward || a.kind == ActionKind::kRecvBackward) {
          const double at = arrival[backward_message][a.peer][m];
          if (at == unset) break;
          clock[d] = std::max(clock[d], at);
        } else if (a.kind == ActionKind::kSendForward || a.kind == ActionKind::kSendBackward) {
          const int64_t to = schedule.device_of(a.peer);
          double at = clock[d];
          if (to != d) {
            auto& free = link_free[{d, to}];
            const double start = std::max(clock[d], free);
            at = start + costs.link.transfer_time(std::min(s, a.peer));
            free = at;
          }
          arrival[backward_message][s][m] = at;
        } else if (a.kind == ActionKind::kForward) {
          run(d, a, "F", a.checkpoint ? priced.no_grad_forward[s] : priced.forward[s]);
        } else if (a.kind == ActionKind::kRecompute) {
          run(d, a, "R", priced.recompute[s]);
        } else if (a.kind == ActionKind::kBackward) {
          run(d, a, "B", priced.input_grad[s]);
        } else {
          run(d, a, "W", priced.weight[s]);
        }
      }
    }
  }
  result.step_time = *std::max_element(clock.begin(), clock.end());
  double busy = 0;
  for (double b : result.busy_per_device)
    busy += b;
  result.bubble_fraction =
      result.step_time > 0 ? 1.0 - busy / static_cast<double>(K) / result.step_time : 0.0;
  result.peak_inflight_per_device = peak_inflight(schedule);
  return result;
}

std::vector<std::string> draw_schedule(const Schedule& schedule, Checkpoint checkpoint) {
  const int64_t S = schedule.num_stages();
  SimulationCosts unit;
  unit.forward.assign(S, 1.0);
  unit.backward.assign(S, 2.0);
  const auto result = simulate(schedule, unit, checkpoint);
  const auto cells = static_cast<size_t>(std::lround(result.step_time));
  std::vector<std::vector<std::string>> grid(schedule.devices,
                                             std::vector<std::string>(cells, "."));
  for (const auto& e : result.events) {
    // A device's first virtual stage in upper case, its second in lower case.
    int64_t chunk = 0;
    for (int64_t s = 0; s < e.virtual_stage; ++s)
      chunk += schedule.device_of(s) == e.device ? 1 : 0;
    std::string label = e.name;
    if (chunk % 2 == 1) label[0] = static_cast<char>(std::tolower(label[0]));
    const auto first = static_cast<size_t>(std::lround(e.start));
    const auto count = static_cast<size_t>(std::lround(e.duration));
    for (size_t c = first; c < first + count && c < cells; ++c)
      grid[e.device][c] = label;
  }
  std::vector<std::string> rows;
  for (int64_t d = 0; d < schedule.devices; ++d) {
    std::string row = "s" + std::to_string(d) + " ";
    for (const auto& cell : grid[d])
      row += " " + cell + std::string(cell.size() < 2 ? 2 - cell.size() : 0, ' ');
    while (!row.empty() && row.back() == ' ')
      row.pop_back();
    rows.push_back(row);
  }
  return rows;
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

std::optional<double> bubble_formula(ScheduleKind kind, int64_t K, int64_t M, int64_t v, double F,
                                     double B, double W) {
  const double k = static_cast<double>(K - 1);
  double idle = 0;
  switch (kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::k1F1B:
      idle = k * (F + B + W);
      break;
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kLoopedBFS:
      idle = k * (F + B + W) / static_cast<double>(v);
      break;
    case ScheduleKind::kZBH1:
      idle = k * (F + B - W);
      break;
    case ScheduleKind::kZBH2:
      idle = k * std::max(F, F + B - 2 * W);
      break;
    case ScheduleKind::kDualPipeV:
      idle = k * ((F + B + W) / 2 + (B + W) / 2 - 3 * W / 2);
      break;
    case ScheduleKind::kVHalf:
      idle = k * (F + B) - W / 2;
      break;
    case ScheduleKind::kZBV:
    case ScheduleKind::kCustom:
      return std::nullopt;
  }
  return idle / (static_cast<double>(M) * (F + B + W) + idle);
}

nlohmann::json to_json(const SimulationResult& result) {
  return {{"step_time", result.step_time},
          {"bubble_fraction", result.bubble_fraction},
          {"busy_per_device", result.busy_per_device},
          {"peak_inflight_per_device", result.peak_inflight_per_device}};
}

}  // namespace gpipe
