#include "gpipe/schedule.h"

#include <algorithm>
#include <tuple>

#include "gpipe/errors.h"

namespace gpipe {

// zbv's list scheduler (schedule_zbv.cpp).
std::vector<std::vector<Action>> zbv_actions(int64_t devices, int64_t microbatches);

namespace {

std::vector<Action> gpipe_device(int64_t microbatches, int64_t stage) {
  std::vector<Action> actions;
  for (int64_t m = 0; m < microbatches; ++m)
    actions.push_back(Action{ActionKind::kForward, stage, m});
  for (int64_t m = microbatches - 1; m >= 0; --m)
    actions.push_back(Action{ActionKind::kBackward, stage, m});
  return actions;
}

std::vector<Action> one_f_one_b_device(int64_t stage, int64_t stages, int64_t microbatches) {
  const int64_t warmup = std::min(stages - stage - 1, microbatches);
  std::vector<Action> actions;
  int64_t next_forward = 0;
  int64_t next_backward = 0;
  for (; next_forward < warmup; ++next_forward)
    actions.push_back(Action{ActionKind::kForward, stage, next_forward});
  while (next_forward < microbatches) {
    actions.push_back(Action{ActionKind::kForward, stage, next_forward++});
    actions.push_back(Action{ActionKind::kBackward, stage, next_backward++});
  }
  while (next_backward < microbatches)
    actions.push_back(Action{ActionKind::kBackward, stage, next_backward++});
  return actions;
}

// 1F1B's order; W(m) right after B(m + stage), the W's still owed at the end.
std::vector<Action> zb_h1_device(int64_t stage, int64_t stages, int64_t microbatches) {
  std::vector<Action> actions;
  int64_t next_weight = 0;
  for (const auto& a : one_f_one_b_device(stage, stages, microbatches)) {
    actions.push_back(a);
    if (a.kind == ActionKind::kBackward && a.microbatch - stage >= 0) {
      actions.push_back(Action{ActionKind::kWeight, stage, next_weight++});
    }
  }
  while (next_weight < microbatches)
    actions.push_back(Action{ActionKind::kWeight, stage, next_weight++});
  return actions;
}

// Megatron's interleaved 1F1B: the k-th forward of a device runs chunk (k / K) % v on
// micro-batch (k / (K v)) K + k % K; backwards walk the chunks in reverse.
std::vector<Action> interleaved_device(int64_t device, int64_t K, int64_t M, int64_t v) {
  const int64_t total = M * v;
  auto at = [&](int64_t k, bool backward) {
    const int64_t round = (k / K) % v;
    const int64_t chunk = backward ? v - 1 - round : round;
    const int64_t m = (k / (K * v)) * K + k % K;
    return Action{backward ? ActionKind::kBackward : ActionKind::kForward, chunk * K + device, m};
  };
  const int64_t warmup = std::min((K - device - 1) * 2 + (v - 1) * K, total);
  std::vector<Action> actions;
  for (int64_t k = 0; k < warmup; ++k)
    actions.push_back(at(k, false));
  for (int64_t i = 0; i < total - warmup; ++i) {
    actions.push_back(at(warmup + i, false));
    actions.push_back(at(i, true));
  }
  for (int64_t i = total - warmup; i < total; ++i)
    actions.push_back(at(i, true));
  return actions;
}

void check_shape(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  GPIPE_CHECK(K >= 1, ConfigError, "a schedule needs at least one device, got K=", K);
  GPIPE_CHECK(M >= 1, ConfigError, "a schedule needs at least one micro-batch, got M=", M);
  check_virtual_stages(kind, v);
}

Schedule empty_schedule(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  Schedule schedule;
  schedule.kind = kind;
  schedule.devices = K;
  schedule.virtual_stages = v;
  schedule.microbatches = M;
  for (int64_t s = 0; s < K * v; ++s)
    schedule.stage_device.push_back(stage_device(kind, K, v, s));
  schedule.actions.resize(K);
  return schedule;
}

}  // namespace

bool Schedule::splits_backward() const {
  for (const auto& device : actions) {
    for (const auto& a : device) {
      if (a.kind == ActionKind::kWeight) return true;
    }
  }
  return false;
}

void check_virtual_stages(ScheduleKind kind, int64_t v) {
  switch (kind) {
    case ScheduleKind::kInterleaved1F1B:
      GPIPE_CHECK(v >= 1, ConfigError, "interleaved-1f1b needs v >= 1 virtual stages, got ", v);
      break;
    case ScheduleKind::kZBV:
      GPIPE_CHECK(v == 2, ConfigError,
                  "zbv places exactly two virtual stages on each device, got v=", v);
      break;
    default:
      GPIPE_CHECK(v == 1, ConfigError, to_string(kind), " runs one stage per device, got v=", v,
                  "; virtual stages are for interleaved-1f1b and zbv");
  }
}

int64_t default_virtual_stages(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleaved1F1B || kind == ScheduleKind::kZBV ? 2 : 1;
}

int64_t stage_device(ScheduleKind kind, int64_t devices, int64_t virtual_stages, int64_t stage) {
  GPIPE_CHECK(stage >= 0 && stage < devices * virtual_stages, ConfigError, "virtual stage ", stage,
              " is outside K=", devices, " x v=", virtual_stages);
  if (kind == ScheduleKind::kZBV) return stage < devices ? stage : 2 * devices - 1 - stage;
  return stage % devices;
}

namespace {

template <typename T>
std::vector<T> fold_onto_devices(ScheduleKind kind, int64_t devices, const std::vector<T>& stages) {
  const auto S = static_cast<int64_t>(stages.size());
  GPIPE_CHECK(devices >= 1 && S % devices == 0, ConfigError, S,
              " virtual stages cannot be placed on K=", devices,
              " devices: give K x v stages, v per device");
  std::vector<T> out(devices, T{0});
  for (int64_t s = 0; s < S; ++s)
    out[stage_device(kind, devices, S / devices, s)] += stages[s];
  return out;
}

}  // namespace

std::vector<int64_t> sum_per_device(ScheduleKind kind, int64_t devices,
                                    const std::vector<int64_t>& per_stage) {
  return fold_onto_devices(kind, devices, per_stage);
}

std::vector<double> sum_per_device(ScheduleKind kind, int64_t devices,
                                   const std::vector<double>& per_stage) {
  return fold_onto_devices(kind, devices, per_stage);
}

Schedule make_schedule(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  check_shape(kind, K, M, v);
  GPIPE_CHECK(kind != ScheduleKind::kZBV || K >= 2, ConfigError,
              "zbv needs at least two devices (its V turns on the last one), got K=", K);
  GPIPE_CHECK(kind != ScheduleKind::kInterleaved1F1B || M % K == 0, ConfigError,
              "interleaved-1f1b runs micro-batches in rounds of K: M=", M,
              " is not a multiple of K=", K, "; use M=", (M / K + 1) * K);
  Schedule schedule = empty_schedule(kind, K, M, v);
  if (kind == ScheduleKind::kZBV) {
    schedule.actions = zbv_actions(K, M);
    return schedule;
  }
  for (int64_t d = 0; d < K; ++d) {
    auto& list = schedule.actions[d];
    switch (kind) {
      case ScheduleKind::kGPipe:
        list = gpipe_device(M, d);
        break;
      case ScheduleKind::k1F1B:
        list = one_f_one_b_device(d, K, M);
        break;
      case ScheduleKind::kZBH1:
        list = zb_h1_device(d, K, M);
        break;
      default:
        list = interleaved_device(d, K, M, v);
    }
  }
  return schedule;
}

Schedule make_forward_schedule(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  check_shape(kind, K, M, v);
  Schedule schedule = empty_schedule(kind, K, M, v);
  schedule.forward_only = true;
  // Wavefront order: F(s, m) waits only for F(s-1, m), whose key m + s - 1 is smaller, so no
  // device ever waits on an action that waits on it.
  std::vector<std::vector<std::tuple<int64_t, int64_t, int64_t>>> order(K);
  for (int64_t s = 0; s < K * v; ++s) {
    for (int64_t m = 0; m < M; ++m)
      order[schedule.device_of(s)].emplace_back(m + s, s, m);
  }
  for (int64_t d = 0; d < K; ++d) {
    std::sort(order[d].begin(), order[d].end());
    for (const auto& [key, s, m] : order[d])
      schedule.actions[d].push_back(Action{ActionKind::kForward, s, m});
  }
  return schedule;
}

std::vector<double> peak_inflight(const Schedule& schedule) {
  const bool split = schedule.splits_backward();
  const double share = 1.0 / static_cast<double>(schedule.virtual_stages);
  const ActionKind frees = split ? ActionKind::kWeight : ActionKind::kBackward;
  std::vector<double> peaks;
  for (const auto& device : schedule.actions) {
    double held = 0, peak = 0;
    for (const auto& a : device) {
      if (a.kind == ActionKind::kForward) held += share;
      if (a.kind == frees) held -= share;
      peak = std::max(peak, held);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
                    ScheduleKind::kZBH1, ScheduleKind::kZBV}) {
    if (name == to_string(kind)) return kind;
  }
  throw ConfigError(c10::str("unknown schedule '", name,
                             "': expected gpipe, 1f1b, interleaved-1f1b, zb-h1 or zbv"));
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved-1f1b";
    case ScheduleKind::kZBH1:
      return "zb-h1";
    case ScheduleKind::kZBV:
      return "zbv";
  }
  return "?";
}

std::string to_string(const Action& action) {
  const char* names[] = {"F", "B", "W", "R", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
  std::string text = names[static_cast<int>(action.kind)] + std::to_string(action.microbatch);
  if (action.peer >= 0) {
    text += c10::str(
        "(", action.stage,
        action.kind == ActionKind::kSendForward || action.kind == ActionKind::kSendBackward ? "->"
                                                                                            : "<-",
        action.peer, ")");
  }
  return text;
}

}  // namespace gpipe
