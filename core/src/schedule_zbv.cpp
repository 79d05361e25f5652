// zbv's order: a list scheduler over the V placement, run at unit costs (F = B = W = 1).
//
// Why a scheduler and not a formula: the V's two halves meet on every device at different
// times, and a deferred W is only worth running where it fits before the next input arrives.
// Simulating the step at unit costs and recording what each device ran is the simplest exact
// statement of that rule; the result is a fixed list like any other schedule's.
#include <deque>
#include <limits>

#include "gpipe/errors.h"
#include "gpipe/schedule.h"

namespace gpipe {

std::vector<std::vector<Action>> zbv_actions(int64_t K, int64_t M) {
  const int64_t S = 2 * K;
  const int64_t limit = 2 * K;  // half-stage micro-batches a device may hold: 1F1B's peak
  constexpr int64_t kNone = -1;
  std::vector<std::vector<int64_t>> f_end(S, std::vector<int64_t>(M, kNone));
  std::vector<std::vector<int64_t>> b_end(S, std::vector<int64_t>(M, kNone));
  std::vector<int64_t> next_f(S, 0), next_b(S, 0), clock(K, 0), held(K, 0);
  std::vector<std::deque<std::pair<int64_t, int64_t>>> owed_w(K);
  std::vector<std::vector<Action>> actions(K);
  auto emit = [&](int64_t d, ActionKind kind, int64_t s, int64_t m) {
    actions[d].push_back(Action{kind, s, m});
    clock[d] += 1;
  };
  auto run_w = [&](int64_t d) {
    const auto [s, m] = owed_w[d].front();
    owed_w[d].pop_front();
    emit(d, ActionKind::kWeight, s, m);
    --held[d];
  };

  struct Pick {
    int64_t ready = 0, start = 0, priority = 0, m = 0, neg_stage = 0, stage = -1;
    bool backward = false;
    bool better_than(const Pick& o) const {
      return std::tie(start, priority, m, neg_stage) <
             std::tie(o.start, o.priority, o.m, o.neg_stage);
    }
  };
  int64_t remaining = 2 * S * M;  // F and B of every (stage, micro-batch)
  while (remaining > 0) {
    int64_t best_device = -1;
    Pick best;
    bool forced_w = false;
    for (int64_t d = 0; d < K; ++d) {
      Pick pick;
      for (int64_t s : {d, S - 1 - d}) {
        const int64_t mb = next_b[s];
        if (mb < M && f_end[s][mb] != kNone) {
          const int64_t ready = s == S - 1 ? f_end[s][mb] : b_end[s + 1][mb];
          if (ready != kNone) {
            Pick c{ready, std::max(ready, clock[d]), 0, mb, -s, s, true};
            if (pick.stage < 0 || c.better_than(pick)) pick = c;
          }
        }
        const int64_t mf = next_f[s];
        if (mf < M && held[d] < limit) {
          const int64_t ready = s == 0 ? 0 : f_end[s - 1][mf];
          if (ready != kNone) {
            Pick c{ready, std::max(ready, clock[d]), 1, mf, -s, s, false};
            if (pick.stage < 0 || c.better_than(pick)) pick = c;
          }
        }
      }
      const bool must_w = pick.stage < 0 && !owed_w[d].empty() && held[d] >= limit;
      // Memory blocks every forward and no backward is ready: a W must run first.
      if (must_w) pick = Pick{clock[d], clock[d], 2, 0, 0, -1, false};
      if (pick.stage < 0 && !must_w) continue;
      if (best_device < 0 ||
          std::tie(pick.start, pick.priority) < std::tie(best.start, best.priority)) {
        best = pick;
        best_device = d;
        forced_w = must_w;
      }
    }
    GPIPE_CHECK(best_device >= 0, Error, "zbv could not schedule K=", K, " M=", M,
                ": every device waits (a bug in the list scheduler)");
    const int64_t d = best_device;
    if (forced_w) {
      run_w(d);
      continue;
    }
    // Deferred W's that end before the input arrives delay nothing.
    while (!owed_w[d].empty() && clock[d] + 1 <= best.ready)
      run_w(d);
    clock[d] = std::max(clock[d], best.ready);
    const int64_t s = best.stage, m = best.m;
    if (best.backward) {
      emit(d, ActionKind::kBackward, s, m);
      b_end[s][m] = clock[d];
      ++next_b[s];
      owed_w[d].emplace_back(s, m);
    } else {
      emit(d, ActionKind::kForward, s, m);
      f_end[s][m] = clock[d];
      ++next_f[s];
      ++held[d];
    }
    --remaining;
  }
  for (int64_t d = 0; d < K; ++d) {
    while (!owed_w[d].empty())
      run_w(d);
  }
  return actions;
}

}  // namespace gpipe
