// The list-scheduled orders (zb-h2, zbv, v-half): a list scheduler run at unit costs
// (F = B = W = 1 per virtual stage).
//
// Why a scheduler and not a formula: where a schedule's rule is "run what is ready, defer W into
// the gaps, hold at most so many micro-batches", the exact order depends on when each input
// arrives. Simulating the step at unit costs and recording what each device ran is the simplest
// exact statement of that rule; the result is a fixed list like any other schedule's.
#include <algorithm>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

#include "gpipe/errors.h"
#include "schedule_list.h"

namespace gpipe {
namespace {

constexpr int64_t kNone = -1;

// A device's candidate next action: when it could start and how it ranks (earliest start, then
// B before F before a forced W, then the lower micro-batch, then the later stage).
struct Pick {
  int64_t ready = 0, start = 0, priority = 0, m = 0, neg_stage = 0, stage = -1;
  bool backward = false;
  bool better_than(const Pick& o) const {
    return std::tie(start, priority, m, neg_stage) <
           std::tie(o.start, o.priority, o.m, o.neg_stage);
  }
};

// The list scheduler's state at unit costs: when each (stage, micro-batch)'s F and B ended, each
// device's clock, the stage micro-batches it holds and the W's it still owes.
class ListScheduler {
 public:
  ListScheduler(int64_t K, int64_t M, ListRule rule)
      : K_(K),
        M_(M),
        S_(static_cast<int64_t>(rule.stage_device.size())),
        rule_(std::move(rule)),
        stages_(K),
        f_end_(S_, std::vector<int64_t>(M, kNone)),
        b_end_(S_, std::vector<int64_t>(M, kNone)),
        next_f_(S_, 0),
        next_b_(S_, 0),
        clock_(K, 0),
        held_(K, 0),
        owed_w_(K),
        actions_(K) {
    for (int64_t s = 0; s < S_; ++s)
      stages_[rule_.stage_device[s]].push_back(s);
  }

  std::vector<std::vector<Action>> run() {
    for (int64_t remaining = 2 * S_ * M_; remaining > 0;) {  // F and B of every (stage, m)
      int64_t best_device = -1;
      Pick best;
      bool forced_w = false;
      for (int64_t d = 0; d < K_; ++d) {
        Pick pick = best_of(d);
        // Memory blocks every forward and no backward is ready: a W must run first.
        const bool must_w = pick.stage < 0 && !owed_w_[d].empty() && held_[d] >= rule_.limit[d];
        if (must_w) pick = Pick{clock_[d], clock_[d], 2, 0, 0, -1, false};
        if (pick.stage < 0 && !must_w) continue;
        if (best_device < 0 ||
            std::tie(pick.start, pick.priority) < std::tie(best.start, best.priority)) {
          best = pick;
          best_device = d;
          forced_w = must_w;
        }
      }
      GPIPE_CHECK(best_device >= 0, Error, "the list scheduler could not schedule K=", K_,
                  " M=", M_, ": every device waits (its memory limit is too small)");
      if (forced_w) {
        run_w(best_device);
      } else {
        run_pick(best_device, best);
        --remaining;
      }
    }
    for (int64_t d = 0; d < K_; ++d) {
      while (!owed_w_[d].empty())
        run_w(d);
    }
    return actions_;
  }

 private:
  // Device d's best ready F or B over its stages (stage < 0: none is ready).
  Pick best_of(int64_t d) const {
    Pick pick;
    for (int64_t s : stages_[d]) {
      const int64_t mb = next_b_[s];
      if (mb < M_ && f_end_[s][mb] != kNone) {
        const int64_t ready = s == S_ - 1 ? f_end_[s][mb] : b_end_[s + 1][mb];
        if (ready != kNone) {
          Pick c{ready, std::max(ready, clock_[d]), 0, mb, -s, s, true};
          if (pick.stage < 0 || c.better_than(pick)) pick = c;
        }
      }
      const int64_t mf = next_f_[s];
      if (mf < M_ && held_[d] < rule_.limit[d]) {
        const int64_t ready = s == 0 ? rule_.entry_interval * mf : f_end_[s - 1][mf];
        if (ready != kNone) {
          Pick c{ready, std::max(ready, clock_[d]), 1, mf, -s, s, false};
          if (pick.stage < 0 || c.better_than(pick)) pick = c;
        }
      }
    }
    return pick;
  }

  void emit(int64_t d, ActionKind kind, int64_t s, int64_t m) {
    actions_[d].push_back(Action{kind, s, m});
    clock_[d] += 1;
  }

  void run_w(int64_t d) {
    const auto [s, m] = owed_w_[d].front();
    owed_w_[d].pop_front();
    emit(d, ActionKind::kWeight, s, m);
    --held_[d];
  }

  void run_pick(int64_t d, const Pick& pick) {
    // Deferred W's that end before the input arrives delay nothing.
    while (!owed_w_[d].empty() && clock_[d] + 1 <= pick.ready)
      run_w(d);
    clock_[d] = std::max(clock_[d], pick.ready);
    const int64_t s = pick.stage, m = pick.m;
    if (pick.backward) {
      emit(d, ActionKind::kBackward, s, m);
      b_end_[s][m] = clock_[d];
      ++next_b_[s];
      owed_w_[d].emplace_back(s, m);
    } else {
      emit(d, ActionKind::kForward, s, m);
      f_end_[s][m] = clock_[d];
      ++next_f_[s];
      ++held_[d];
    }
  }

  const int64_t K_, M_, S_;
  const ListRule rule_;
  std::vector<std::vector<int64_t>> stages_;  // per device, its stages in model order
  std::vector<std::vector<int64_t>> f_end_, b_end_;
  std::vector<int64_t> next_f_, next_b_, clock_, held_;
  std::vector<std::deque<std::pair<int64_t, int64_t>>> owed_w_;
  std::vector<std::vector<Action>> actions_;
};

}  // namespace

std::vector<std::vector<Action>> list_schedule(int64_t K, int64_t M, ListRule rule) {
  return ListScheduler(K, M, std::move(rule)).run();
}

}  // namespace gpipe
