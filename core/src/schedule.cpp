#include "gpipe/schedule.h"

#include <algorithm>
#include <tuple>

#include "gpipe/errors.h"
#include "schedule_list.h"

namespace gpipe {
namespace {

// Every kind, in the order names and messages list them.
constexpr ScheduleKind kAllKinds[] = {
    ScheduleKind::kGPipe,     ScheduleKind::k1F1B,      ScheduleKind::kInterleaved1F1B,
    ScheduleKind::kZBH1,      ScheduleKind::kZBH2,      ScheduleKind::kZBV,
    ScheduleKind::kLoopedBFS, ScheduleKind::kDualPipeV, ScheduleKind::kVHalf,
};

bool is_v_shaped(ScheduleKind kind) {
  return kind == ScheduleKind::kZBV || kind == ScheduleKind::kDualPipeV ||
         kind == ScheduleKind::kVHalf;
}

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

// Breadth first: every forward of the device's first stage, then of its next one, ...; then the
// backwards, last stage first, each stage's last micro-batch first (as gpipe).
std::vector<Action> looped_bfs_device(int64_t device, int64_t K, int64_t M, int64_t v) {
  std::vector<Action> actions;
  for (int64_t c = 0; c < v; ++c) {
    for (int64_t m = 0; m < M; ++m)
      actions.push_back(Action{ActionKind::kForward, c * K + device, m});
  }
  for (int64_t c = v - 1; c >= 0; --c) {
    for (int64_t m = M - 1; m >= 0; --m)
      actions.push_back(Action{ActionKind::kBackward, c * K + device, m});
  }
  return actions;
}

// DualPipeV's eight phases for one device (DeepSeek's dualpipev.py, read, not copied). Half 0 is
// the device's stage going down the V, half 1 the one coming back up. A backward DualPipeV runs
// whole is a B with its W right after it; one it splits queues its W (first in, first out) for
// the phases that run W's.
class DualPipeVDevice {
 public:
  DualPipeVDevice(int64_t device, int64_t K, int64_t M)
      : d_(device), K_(K), M_(M), stage_{device, 2 * K - 1 - device} {}

  std::vector<Action> run() {
    const int64_t d = d_, K = K_;
    repeat(2 * (K - d - 1), [&] { forward(0); });
    repeat(d + 1, [&] {
      forward(0);
      forward(1);
    });
    repeat(K - d - 1, [&] {
      backward(1, true);
      weight();
      forward(1);
    });
    // A paired forward and backward (overlapped in DeepSeek's engine) runs as two actions, F
    // then B.
    repeat(M_ - 2 * K + d + 1, [&] {
      forward(0);
      backward(1, false);
      forward(1);
      backward(0, false);
    });
    repeat(K - d - 1, [&] {
      backward(1, false);
      forward(1);
      backward(0, false);
    });
    // The second half of these backwards defers its W's.
    for (int64_t i = 0; i < d + 1; ++i) {
      const bool later = i >= (d + 1) / 2;
      backward(1, later && (d % 2 == 1 || i > (d + 1) / 2));
      backward(0, later);
    }
    repeat(K - d - 1, [&] {
      weight();
      backward(0, true);
    });
    repeat(d + 1, [&] { weight(); });
    GPIPE_CHECK(owed_.empty(), Error, "dualpipev device ", d, " owes ", owed_.size(), " W's");
    return std::move(actions_);
  }

 private:
  template <typename F>
  static void repeat(int64_t n, F&& body) {
    for (int64_t i = 0; i < n; ++i)
      body();
  }
  void forward(int half) {
    actions_.push_back(Action{ActionKind::kForward, stage_[half], next_f_[half]++});
  }
  void backward(int half, bool defer_w) {
    const Action b{ActionKind::kBackward, stage_[half], next_b_[half]++};
    actions_.push_back(b);
    const Action w{ActionKind::kWeight, b.stage, b.microbatch};
    if (defer_w) {
      owed_.push_back(w);
    } else {
      actions_.push_back(w);
    }
  }
  void weight() {
    GPIPE_CHECK(!owed_.empty(), Error, "dualpipev device ", d_, " runs a W it does not owe");
    actions_.push_back(owed_.front());
    owed_.erase(owed_.begin());
  }

  const int64_t d_, K_, M_;
  const int64_t stage_[2];
  int64_t next_f_[2] = {0, 0}, next_b_[2] = {0, 0};
  std::vector<Action> owed_;
  std::vector<Action> actions_;
};

// The list-scheduled kinds' rules (schedule_list.h).
ListRule list_rule(ScheduleKind kind, int64_t K) {
  ListRule rule;
  rule.stage_device = placement(kind, K, default_virtual_stages(kind));
  // zb-h2: 2K-1 micro-batches on every device, the paper's most (its first stage's), so the
  // warm-up fills the first bubble and, in a step that ends together, the drain defers its W's.
  // zbv: 1F1B's K micro-batches, 2K half-stage ones. v-half: the same limit never binds; a
  // micro-batch enters every 6 units (F, B and W of two halves: the steady state's interval),
  // which holds ceil(K/2) micro-batches, half of 1F1B's.
  rule.limit.assign(K, kind == ScheduleKind::kZBH2 ? 2 * K - 1 : 2 * K);
  if (kind == ScheduleKind::kVHalf) rule.entry_interval = 6;
  return rule;
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
  schedule.stage_device = placement(kind, K, v);
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
    case ScheduleKind::kLoopedBFS:
      GPIPE_CHECK(v >= 1, ConfigError, "looped-bfs needs v >= 1 virtual stages, got ", v);
      break;
    case ScheduleKind::kZBV:
    case ScheduleKind::kDualPipeV:
    case ScheduleKind::kVHalf:
      GPIPE_CHECK(v == 2, ConfigError, to_string(kind),
                  " places exactly two virtual stages on each device (a V), got v=", v);
      break;
    case ScheduleKind::kCustom:
      GPIPE_CHECK(v >= 1, ConfigError, "a custom schedule needs v >= 1 virtual stages, got ", v);
      break;
    default:
      GPIPE_CHECK(v == 1, ConfigError, to_string(kind), " runs one stage per device, got v=", v,
                  "; virtual stages are for interleaved-1f1b, looped-bfs and the V schedules");
  }
}

int64_t default_virtual_stages(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleaved1F1B || kind == ScheduleKind::kLoopedBFS ||
                 is_v_shaped(kind)
             ? 2
             : 1;
}

int64_t stage_device(ScheduleKind kind, int64_t devices, int64_t virtual_stages, int64_t stage) {
  GPIPE_CHECK(stage >= 0 && stage < devices * virtual_stages, ConfigError, "virtual stage ", stage,
              " is outside K=", devices, " x v=", virtual_stages);
  GPIPE_CHECK(kind != ScheduleKind::kCustom, ConfigError,
              "a custom schedule places its stages itself: read it from its file");
  if (is_v_shaped(kind)) return stage < devices ? stage : 2 * devices - 1 - stage;
  return stage % devices;
}

namespace {

template <typename T>
std::vector<T> fold_onto_devices(const std::vector<int64_t>& stage_device, int64_t devices,
                                 const std::vector<T>& stages) {
  GPIPE_CHECK(stage_device.size() == stages.size(), ConfigError, stages.size(),
              " virtual stages cannot be placed by a placement of ", stage_device.size());
  std::vector<T> out(devices, T{0});
  for (size_t s = 0; s < stages.size(); ++s) {
    GPIPE_CHECK(stage_device[s] >= 0 && stage_device[s] < devices, ConfigError, "virtual stage ", s,
                " is placed on device ", stage_device[s], " of ", devices);
    out[stage_device[s]] += stages[s];
  }
  return out;
}

template <typename T>
std::vector<T> fold_onto_devices(ScheduleKind kind, int64_t devices, const std::vector<T>& stages) {
  const auto S = static_cast<int64_t>(stages.size());
  GPIPE_CHECK(devices >= 1 && S % devices == 0, ConfigError, S,
              " virtual stages cannot be placed on K=", devices,
              " devices: give K x v stages, v per device");
  return fold_onto_devices(placement(kind, devices, S / devices), devices, stages);
}

}  // namespace

std::vector<int64_t> placement(ScheduleKind kind, int64_t devices, int64_t virtual_stages) {
  std::vector<int64_t> out;
  for (int64_t s = 0; s < devices * virtual_stages; ++s)
    out.push_back(stage_device(kind, devices, virtual_stages, s));
  return out;
}

std::vector<int64_t> sum_per_device(const std::vector<int64_t>& stage_device, int64_t devices,
                                    const std::vector<int64_t>& per_stage) {
  return fold_onto_devices(stage_device, devices, per_stage);
}

std::vector<double> sum_per_device(const std::vector<int64_t>& stage_device, int64_t devices,
                                   const std::vector<double>& per_stage) {
  return fold_onto_devices(stage_device, devices, per_stage);
}

std::vector<int64_t> sum_per_device(ScheduleKind kind, int64_t devices,
                                    const std::vector<int64_t>& per_stage) {
  return fold_onto_devices(kind, devices, per_stage);
}

std::vector<double> sum_per_device(ScheduleKind kind, int64_t devices,
                                   const std::vector<double>& per_stage) {
  return fold_onto_devices(kind, devices, per_stage);
}

void check_training_shape(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  GPIPE_CHECK(kind != ScheduleKind::kCustom, ConfigError,
              "a custom schedule is read from a file (--schedule file:PATH), not made");
  check_shape(kind, K, M, v);
  GPIPE_CHECK(!is_v_shaped(kind) || K >= 2, ConfigError, to_string(kind),
              " needs at least two devices (its V turns on the last one), got K=", K);
  GPIPE_CHECK(kind != ScheduleKind::kDualPipeV || M >= 2 * K, ConfigError,
              "dualpipev needs at least 2K micro-batches to fill its V: M=", M, " with K=", K,
              "; use M=", 2 * K);
  GPIPE_CHECK(kind != ScheduleKind::kInterleaved1F1B || M % K == 0, ConfigError,
              "interleaved-1f1b runs micro-batches in rounds of K: M=", M,
              " is not a multiple of K=", K, "; use M=", (M / K + 1) * K);
}

std::string schedule_shape_error(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  try {
    check_training_shape(kind, K, M, v);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Schedule make_schedule(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  check_training_shape(kind, K, M, v);
  Schedule schedule = empty_schedule(kind, K, M, v);
  if (kind == ScheduleKind::kZBV || kind == ScheduleKind::kZBH2 || kind == ScheduleKind::kVHalf) {
    schedule.actions = list_schedule(K, M, list_rule(kind, K));
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
      case ScheduleKind::kLoopedBFS:
        list = looped_bfs_device(d, K, M, v);
        break;
      case ScheduleKind::kDualPipeV:
        list = DualPipeVDevice(d, K, M).run();
        break;
      default:
        list = interleaved_device(d, K, M, v);
    }
  }
  return schedule;
}

Schedule make_forward_schedule(ScheduleKind kind, int64_t K, int64_t M, int64_t v) {
  check_shape(kind, K, M, v);
  return forward_schedule_like(empty_schedule(kind, K, M, v), M);
}

Schedule forward_schedule_like(const Schedule& training, int64_t M) {
  GPIPE_CHECK(M >= 1, ConfigError, "a schedule needs at least one micro-batch, got M=", M);
  const int64_t K = training.devices;
  Schedule schedule = training;
  schedule.microbatches = M;
  schedule.forward_only = true;
  schedule.lowered = false;
  schedule.actions.assign(K, {});
  // Wavefront order: F(s, m) waits only for F(s-1, m), whose key m + s - 1 is smaller, so no
  // device ever waits on an action that waits on it.
  std::vector<std::vector<std::tuple<int64_t, int64_t, int64_t>>> order(K);
  for (int64_t s = 0; s < schedule.num_stages(); ++s) {
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

std::vector<ScheduleKind> all_schedule_kinds() {
  return {std::begin(kAllKinds), std::end(kAllKinds)};
}

std::string schedule_kind_names(const std::string& separator) {
  std::string out;
  for (auto kind : kAllKinds)
    out += (out.empty() ? "" : separator) + to_string(kind);
  return out;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (auto kind : kAllKinds) {
    if (name == to_string(kind)) return kind;
  }
  throw ConfigError(
      c10::str("unknown schedule '", name, "': expected one of ", schedule_kind_names(", ")));
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
    case ScheduleKind::kZBH2:
      return "zb-h2";
    case ScheduleKind::kZBV:
      return "zbv";
    case ScheduleKind::kLoopedBFS:
      return "looped-bfs";
    case ScheduleKind::kDualPipeV:
      return "dualpipev";
    case ScheduleKind::kVHalf:
      return "v-half";
    case ScheduleKind::kCustom:
      return "custom";
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
