#include "tables/size_search.h"

#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "gpipe/errors.h"

namespace gpipe::tables {

namespace {

void check_search(const SearchCallbacks& callbacks, double budget_bytes, int max_measurements) {
  const auto& sizes = callbacks.family_sizes;
  GPIPE_CHECK(!sizes.empty(), ConfigError, "the size search has no model family to search");
  for (size_t f = 0; f < sizes.size(); ++f) {
    GPIPE_CHECK(sizes[f] >= 1, ConfigError, "model family ", f, " of the size search is empty");
  }
  GPIPE_CHECK(std::isfinite(budget_bytes) && budget_bytes > 0, ConfigError,
              "the memory budget must be > 0 bytes, got ", budget_bytes);
  GPIPE_CHECK(max_measurements >= 1, ConfigError,
              "the size search needs at least one measured "
              "step, got ",
              max_measurements);
  GPIPE_CHECK(callbacks.parameters && callbacks.predicted_bytes && callbacks.measured_bytes,
              ConfigError, "the size search needs all three callbacks");
}

// The search's state: each member's parameters and prediction (asked once), per family the
// members measured to fit and not to, and the measured / predicted scale of the last step.
class Search {
 public:
  Search(const SearchCallbacks& callbacks, double budget_bytes)
      : callbacks_(callbacks), budget_(budget_bytes), lo_(callbacks.family_sizes.size(), -1) {
    for (size_t f : callbacks.family_sizes)
      hi_.push_back(static_cast<int64_t>(f));
  }

  // The member to measure next: the one with the most parameters predicted to fit; when none
  // is, the smallest unmeasured first member. None when the search is over.
  std::optional<SearchPoint> next() {
    std::optional<SearchPoint> choice;
    double choice_parameters = -1;
    for (size_t f = 0; f < lo_.size(); ++f) {
      const int64_t found = largest_predicted_fit(f);
      if (found < 0) continue;
      const SearchPoint p{f, static_cast<size_t>(found)};
      const double count = parameters(p);
      if (count > choice_parameters) {
        choice = p;
        choice_parameters = count;
      }
    }
    if (!choice) {
      // Nothing is known or predicted to fit: measure the smallest unmeasured first member.
      for (size_t f = 0; f < lo_.size(); ++f) {
        if (lo_[f] >= 0 || hi_[f] == 0) continue;
        const SearchPoint p{f, 0};
        if (!choice || parameters(p) < parameters(*choice)) choice = p;
      }
      return choice;  // none: every family's smallest member was measured not to fit
    }
    // The best prediction is a size already measured to fit: done.
    if (static_cast<int64_t>(choice->member) == lo_[choice->family]) return std::nullopt;
    return choice;
  }

  // Measures `p`, narrows its family's bounds and updates the scale and `outcome.best`.
  SearchStep measure(const SearchPoint& p, SearchOutcome& outcome) {
    SearchStep step;
    step.point = p;
    step.parameters = parameters(p);
    step.predicted_bytes = predicted(p);
    step.scale = scale_;
    step.measured_bytes = callbacks_.measured_bytes(p);
    step.fits = step.measured_bytes <= budget_;
    if (step.predicted_bytes > 0) scale_ = step.measured_bytes / step.predicted_bytes;
    const auto member = static_cast<int64_t>(p.member);
    if (step.fits) {
      lo_[p.family] = member;
      if (!outcome.best || step.parameters > parameters(*outcome.best)) outcome.best = p;
    } else {
      hi_[p.family] = member;
    }
    return step;
  }

  double scale() const { return scale_; }

 private:
  // Largest member of family f in (lo, hi) predicted to fit, by bisection; lo when none is
  // (members at or below lo are known fits).
  int64_t largest_predicted_fit(size_t f) {
    int64_t first = lo_[f] + 1, last = hi_[f] - 1, found = lo_[f];
    while (first <= last) {
      const int64_t mid = first + (last - first) / 2;
      if (predicted({f, static_cast<size_t>(mid)}) * scale_ <= budget_) {
        found = mid;
        first = mid + 1;
      } else {
        last = mid - 1;
      }
    }
    return found;
  }

  double parameters(const SearchPoint& p) {
    auto [it, added] = parameters_.try_emplace({p.family, p.member}, 0.0);
    if (added) it->second = callbacks_.parameters(p);
    return it->second;
  }

  double predicted(const SearchPoint& p) {
    auto [it, added] = predicted_.try_emplace({p.family, p.member}, 0.0);
    if (added) it->second = callbacks_.predicted_bytes(p);
    return it->second;
  }

  const SearchCallbacks& callbacks_;
  const double budget_;
  std::map<std::pair<size_t, size_t>, double> parameters_, predicted_;
  // lo: largest member measured to fit (-1: none); hi: smallest measured not to (size: none).
  std::vector<int64_t> lo_, hi_;
  double scale_ = 1.0;
};

}  // namespace

SearchOutcome search_largest(const SearchCallbacks& callbacks, double budget_bytes,
                             int max_measurements) {
  check_search(callbacks, budget_bytes, max_measurements);
  Search search(callbacks, budget_bytes);
  SearchOutcome outcome;
  while (static_cast<int>(outcome.steps.size()) < max_measurements) {
    const auto next = search.next();
    if (!next) break;
    outcome.steps.push_back(search.measure(*next, outcome));
  }
  outcome.scale = search.scale();
  return outcome;
}

}  // namespace gpipe::tables
