#include "gpipe/lowering.h"

#include <map>
#include <tuple>

#include "gpipe/errors.h"

namespace gpipe {
namespace {

// What a (stage, micro-batch) has done so far on its device, in list order.
struct Progress {
  int forward = 0, backward = 0, weight = 0, recompute = 0;
  int recv_forward = 0, send_forward = 0, recv_backward = 0, send_backward = 0;
  bool checkpoint = false;
};

// Checks one action of device d against what its (stage, micro-batch) did before it, in `p`,
// and records it there.
void check_action(const Schedule& schedule, int64_t d, const Action& a, Progress& p) {
  const auto what = [&] { return c10::str("device ", d, " action ", to_string(a)); };
  const bool first = a.stage == 0, last = a.stage == schedule.num_stages() - 1;
  switch (a.kind) {
    case ActionKind::kRecvForward:
      GPIPE_CHECK(!first && a.peer == a.stage - 1 && p.forward == 0 && ++p.recv_forward == 1,
                  ConfigError, what(), " is misplaced or repeated");
      break;
    case ActionKind::kForward:
      GPIPE_CHECK(++p.forward == 1, ConfigError, what(), " runs twice");
      GPIPE_CHECK(!schedule.lowered || first || p.recv_forward == 1, ConfigError, what(),
                  " runs before its RECV");
      p.checkpoint = a.checkpoint;
      break;
    case ActionKind::kSendForward:
      GPIPE_CHECK(!last && a.peer == a.stage + 1 && p.forward == 1 && ++p.send_forward == 1,
                  ConfigError, what(), " is misplaced or repeated");
      break;
    case ActionKind::kRecompute:
      GPIPE_CHECK(p.checkpoint && p.backward == 0 && ++p.recompute == 1, ConfigError, what(),
                  " needs a checkpointed F before it and no B");
      break;
    case ActionKind::kRecvBackward:
      GPIPE_CHECK(!last && a.peer == a.stage + 1 && p.forward == 1 && p.backward == 0 &&
                      ++p.recv_backward == 1,
                  ConfigError, what(), " is misplaced or repeated");
      break;
    case ActionKind::kBackward:
      GPIPE_CHECK(!schedule.forward_only, ConfigError, "a forward-only schedule has ", what());
      GPIPE_CHECK(p.forward == 1, ConfigError, what(), " runs before F", a.microbatch);
      GPIPE_CHECK(++p.backward == 1, ConfigError, what(), " runs twice");
      GPIPE_CHECK(!schedule.lowered || last || p.recv_backward == 1, ConfigError, what(),
                  " runs before its RECV");
      GPIPE_CHECK(!schedule.lowered || !p.checkpoint || p.recompute == 1, ConfigError, what(),
                  " runs before the R of its checkpointed F");
      break;
    case ActionKind::kSendBackward:
      GPIPE_CHECK(!first && a.peer == a.stage - 1 && p.backward == 1 && ++p.send_backward == 1,
                  ConfigError, what(), " is misplaced or repeated");
      break;
    case ActionKind::kWeight:
      GPIPE_CHECK(p.backward == 1 && ++p.weight == 1, ConfigError, what(),
                  " must follow its B, once");
      break;
  }
  GPIPE_CHECK(schedule.lowered || a.peer < 0, ConfigError, what(),
              " is a message in a schedule that is not lowered");
}

// Checks that (stage s, micro-batch m) ran every action the schedule owes it, from `p` (`split`:
// the schedule lists W actions).
void check_complete(const Schedule& schedule, bool split, int64_t s, int64_t m, const Progress& p) {
  const int64_t S = schedule.num_stages();
  const auto where = [&] { return c10::str("stage ", s, " micro-batch ", m); };
  GPIPE_CHECK(p.forward == 1, ConfigError, where(), " never runs F");
  if (!schedule.forward_only) {
    GPIPE_CHECK(p.backward == 1, ConfigError, where(), " never runs B");
    GPIPE_CHECK(p.weight == (split ? 1 : 0), ConfigError, where(), " runs ", p.weight,
                " W; a split schedule runs one for every B");
  }
  if (!schedule.lowered) return;
  GPIPE_CHECK(p.recompute == (p.checkpoint && !schedule.forward_only ? 1 : 0), ConfigError, where(),
              " has ", p.recompute, " R for a ", p.checkpoint ? "checkpointed" : "kept",
              " forward");
  GPIPE_CHECK(s == S - 1 || p.send_forward == 1, ConfigError, where(), " never sends F");
  GPIPE_CHECK(schedule.forward_only || s == 0 || p.send_backward == 1, ConfigError, where(),
              " never sends B");
}

void check_structure(const Schedule& schedule) {
  const int64_t K = schedule.devices;
  const int64_t M = schedule.microbatches;
  const int64_t S = schedule.num_stages();
  GPIPE_CHECK(K >= 1 && M >= 1 && S >= K, ConfigError, "schedule has K=", K, ", M=", M, ", ", S,
              " virtual stages");
  GPIPE_CHECK(static_cast<int64_t>(schedule.actions.size()) == K, ConfigError, "schedule for K=", K,
              " devices lists actions for ", schedule.actions.size());
  const bool split = schedule.splits_backward();
  std::vector<std::vector<Progress>> done(S, std::vector<Progress>(M));
  // Per stage: B/W actions marked final_gradient, and whether the last B/W was one of them.
  std::vector<int> finals(S, 0);
  std::vector<bool> last_is_final(S, false);
  for (int64_t d = 0; d < K; ++d) {
    for (const auto& a : schedule.actions[d]) {
      const auto what = [&] { return c10::str("device ", d, " action ", to_string(a)); };
      GPIPE_CHECK(a.stage >= 0 && a.stage < S && a.microbatch >= 0 && a.microbatch < M, ConfigError,
                  what(), " names stage ", a.stage, " of ", S, ", micro-batch ", a.microbatch,
                  " of ", M);
      GPIPE_CHECK(schedule.device_of(a.stage) == d, ConfigError, what(), " runs stage ", a.stage,
                  ", which is placed on device ", schedule.device_of(a.stage));
      check_action(schedule, d, a, done[a.stage][a.microbatch]);
      const bool gradient = a.kind == ActionKind::kBackward || a.kind == ActionKind::kWeight;
      GPIPE_CHECK(!a.final_gradient || (schedule.lowered && gradient), ConfigError, what(),
                  " is marked final_gradient but is not a B or W of a lowered schedule");
      if (gradient) {
        finals[a.stage] += a.final_gradient ? 1 : 0;
        last_is_final[a.stage] = a.final_gradient;
      }
    }
  }
  for (int64_t s = 0; s < S; ++s) {
    GPIPE_CHECK(!schedule.lowered || schedule.forward_only || (finals[s] == 1 && last_is_final[s]),
                ConfigError, "stage ", s, " marks ", finals[s],
                " B/W actions final_gradient; a lowered training schedule marks its last one only");
    for (int64_t m = 0; m < M; ++m) {
      check_complete(schedule, split, s, m, done[s][m]);
    }
  }
}

}  // namespace

std::vector<size_t> run_until_blocked(const Schedule& schedule) {
  const int64_t K = schedule.devices;
  const int64_t S = schedule.num_stages();
  const int64_t M = schedule.microbatches;
  // (kind, stage, micro-batch) of everything that has run.
  std::vector<std::vector<std::vector<bool>>> ran(
      8, std::vector<std::vector<bool>>(S, std::vector<bool>(M, false)));
  auto has_run = [&](ActionKind kind, int64_t s, int64_t m) -> bool {
    return ran[static_cast<int>(kind)][s][m];
  };
  auto ready = [&](const Action& a) -> bool {
    const int64_t s = a.stage, m = a.microbatch;
    switch (a.kind) {
      case ActionKind::kRecvForward:
        return has_run(ActionKind::kSendForward, a.peer, m);
      case ActionKind::kRecvBackward:
        return has_run(ActionKind::kSendBackward, a.peer, m);
      case ActionKind::kForward:
        return schedule.lowered || s == 0 || has_run(ActionKind::kForward, s - 1, m);
      case ActionKind::kBackward:
        return schedule.lowered || s == S - 1 || has_run(ActionKind::kBackward, s + 1, m);
      default:
        return true;
    }
  };
  std::vector<size_t> next(K, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t d = 0; d < K; ++d) {
      const auto& list = schedule.actions[d];
      while (next[d] < list.size() && ready(list[next[d]])) {
        const auto& a = list[next[d]++];
        ran[static_cast<int>(a.kind)][a.stage][a.microbatch] = true;
        progress = true;
      }
    }
  }
  return next;
}

namespace {

// Runs every device as far as its inputs allow; one that cannot finish waits forever.
void check_deadlock(const Schedule& schedule) {
  const auto next = run_until_blocked(schedule);
  for (int64_t d = 0; d < schedule.devices; ++d) {
    GPIPE_CHECK(next[d] == schedule.actions[d].size(), ConfigError, "schedule deadlocks: device ",
                d, " waits forever at ", to_string(schedule.actions[d][next[d]]));
  }
}

// Marks, in one device's list, each stage's last B or W: after it the stage's gradients are final.
void mark_final_gradients(std::vector<Action>& list) {
  std::map<int64_t, Action*> last;
  for (auto& a : list) {
    if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kWeight) last[a.stage] = &a;
  }
  for (auto& [stage, action] : last)
    action->final_gradient = true;
}

}  // namespace

bool is_checkpointed(Checkpoint mode, int64_t microbatch, int64_t microbatches) {
  return mode == Checkpoint::kAlways ||
         (mode == Checkpoint::kExceptLast && microbatch != microbatches - 1);
}

Schedule lower(const Schedule& compute, Checkpoint checkpoint) {
  GPIPE_CHECK(!compute.lowered, ConfigError, "the schedule is already lowered");
  validate_schedule(compute);
  Schedule out = compute;
  out.lowered = true;
  const int64_t last = compute.num_stages() - 1;
  const int64_t M = compute.microbatches;
  for (auto& list : out.actions) {
    std::vector<Action> lowered;
    for (Action a : list) {
      const int64_t s = a.stage, m = a.microbatch;
      if (a.kind == ActionKind::kForward) {
        a.checkpoint = !compute.forward_only && is_checkpointed(checkpoint, m, M);
        if (s > 0) lowered.push_back(Action{ActionKind::kRecvForward, s, m, s - 1});
        lowered.push_back(a);
        if (s < last) lowered.push_back(Action{ActionKind::kSendForward, s, m, s + 1});
      } else if (a.kind == ActionKind::kBackward) {
        if (is_checkpointed(checkpoint, m, M)) {
          lowered.push_back(Action{ActionKind::kRecompute, s, m, -1});
        }
        if (s < last) lowered.push_back(Action{ActionKind::kRecvBackward, s, m, s + 1});
        lowered.push_back(a);
        if (s > 0) lowered.push_back(Action{ActionKind::kSendBackward, s, m, s - 1});
      } else {
        lowered.push_back(a);
      }
    }
    if (!compute.forward_only) mark_final_gradients(lowered);
    list = std::move(lowered);
  }
  validate_schedule(out);
  return out;
}

void validate_schedule(const Schedule& schedule) {
  check_structure(schedule);
  check_deadlock(schedule);
}

}  // namespace gpipe
