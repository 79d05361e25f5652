#include "gpipe/schedule.h"

#include <algorithm>

#include "gpipe/errors.h"

namespace gpipe {
namespace {

void check_shape(int64_t stages, int64_t microbatches) {
  GPIPE_CHECK(stages >= 1, ConfigError, "a schedule needs at least one stage, got K=", stages);
  GPIPE_CHECK(microbatches >= 1, ConfigError,
              "a schedule needs at least one micro-batch, got M=", microbatches);
}

std::vector<Action> gpipe_stage(int64_t microbatches) {
  std::vector<Action> actions;
  for (int64_t m = 0; m < microbatches; ++m)
    actions.push_back({ActionKind::kForward, m});
  for (int64_t m = microbatches - 1; m >= 0; --m)
    actions.push_back({ActionKind::kBackward, m});
  return actions;
}

std::vector<Action> one_f_one_b_stage(int64_t stage, int64_t stages, int64_t microbatches) {
  const int64_t warmup = std::min(stages - stage - 1, microbatches);
  std::vector<Action> actions;
  int64_t next_forward = 0;
  int64_t next_backward = 0;
  for (; next_forward < warmup; ++next_forward) {
    actions.push_back({ActionKind::kForward, next_forward});
  }
  while (next_forward < microbatches) {
    actions.push_back({ActionKind::kForward, next_forward++});
    actions.push_back({ActionKind::kBackward, next_backward++});
  }
  while (next_backward < microbatches)
    actions.push_back({ActionKind::kBackward, next_backward++});
  return actions;
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int64_t stages, int64_t microbatches) {
  check_shape(stages, microbatches);
  Schedule schedule{stages, microbatches, {}};
  for (int64_t s = 0; s < stages; ++s) {
    schedule.actions.push_back(kind == ScheduleKind::kGPipe
                                   ? gpipe_stage(microbatches)
                                   : one_f_one_b_stage(s, stages, microbatches));
  }
  return schedule;
}

Schedule make_forward_schedule(int64_t stages, int64_t microbatches) {
  check_shape(stages, microbatches);
  Schedule schedule{stages, microbatches, {}};
  std::vector<Action> actions;
  for (int64_t m = 0; m < microbatches; ++m)
    actions.push_back({ActionKind::kForward, m});
  schedule.actions.assign(stages, actions);
  return schedule;
}

void validate_schedule(const Schedule& schedule, bool forward_only) {
  const int64_t K = schedule.stages;
  const int64_t M = schedule.microbatches;
  check_shape(K, M);
  GPIPE_CHECK(static_cast<int64_t>(schedule.actions.size()) == K, ConfigError, "schedule for K=", K,
              " stages lists actions for ", schedule.actions.size(), " stages");
  // Per stage: each F(m) once, each B(m) once and after F(m).
  for (int64_t s = 0; s < K; ++s) {
    std::vector<int> forwards(M, 0), backwards(M, 0);
    for (const auto& a : schedule.actions[s]) {
      GPIPE_CHECK(a.microbatch >= 0 && a.microbatch < M, ConfigError, "stage ", s, " action ",
                  to_string(a), " names micro-batch ", a.microbatch, " but M=", M);
      if (a.kind == ActionKind::kForward) {
        GPIPE_CHECK(++forwards[a.microbatch] == 1, ConfigError, "stage ", s, " runs ", to_string(a),
                    " twice");
      } else {
        GPIPE_CHECK(!forward_only, ConfigError, "a forward-only schedule has ", to_string(a),
                    " at stage ", s);
        GPIPE_CHECK(forwards[a.microbatch] == 1, ConfigError, "stage ", s, " runs ", to_string(a),
                    " before F", a.microbatch);
        GPIPE_CHECK(++backwards[a.microbatch] == 1, ConfigError, "stage ", s, " runs ",
                    to_string(a), " twice");
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      GPIPE_CHECK(forwards[m] == 1, ConfigError, "stage ", s, " never runs F", m);
      GPIPE_CHECK(forward_only || backwards[m] == 1, ConfigError, "stage ", s, " never runs B", m);
    }
  }
  // Cross-stage dependencies: advance every stage as far as its next action's inputs allow.
  std::vector<size_t> next(K, 0);
  std::vector<std::vector<bool>> done_f(K, std::vector<bool>(M, false));
  std::vector<std::vector<bool>> done_b(K, std::vector<bool>(M, false));
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t s = 0; s < K; ++s) {
      while (next[s] < schedule.actions[s].size()) {
        const auto& a = schedule.actions[s][next[s]];
        const bool ready = a.kind == ActionKind::kForward
                               ? (s == 0 || done_f[s - 1][a.microbatch])
                               : (s == K - 1 || done_b[s + 1][a.microbatch]);
        if (!ready) break;
        (a.kind == ActionKind::kForward ? done_f : done_b)[s][a.microbatch] = true;
        ++next[s];
        progress = true;
      }
    }
  }
  for (int64_t s = 0; s < K; ++s) {
    GPIPE_CHECK(next[s] == schedule.actions[s].size(), ConfigError, "schedule deadlocks: stage ", s,
                " waits forever at ", to_string(schedule.actions[s][next[s]]));
  }
}

std::vector<int64_t> peak_inflight(const Schedule& schedule) {
  std::vector<int64_t> peaks;
  for (const auto& stage : schedule.actions) {
    int64_t held = 0, peak = 0;
    for (const auto& a : stage) {
      held += a.kind == ActionKind::kForward ? 1 : -1;
      peak = std::max(peak, held);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  throw ConfigError(c10::str("unknown schedule '", name, "': expected gpipe or 1f1b"));
}

std::string to_string(ScheduleKind kind) {
  return kind == ScheduleKind::kGPipe ? "gpipe" : "1f1b";
}

std::string to_string(const Action& action) {
  return (action.kind == ActionKind::kForward ? "F" : "B") + std::to_string(action.microbatch);
}

}  // namespace gpipe
