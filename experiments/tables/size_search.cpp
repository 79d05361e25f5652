#include "tables/size_search.h"

#include <cmath>
#include <map>

#include "gpipe/errors.h"

namespace gpipe::tables {

SearchOutcome search_largest(const SearchCallbacks& callbacks, double budget_bytes,
                             int max_measurements) {
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

  std::map<std::pair<size_t, size_t>, double> parameters_cache, predicted_cache;
  auto parameters = [&](const SearchPoint& p) {
    auto [it, added] = parameters_cache.try_emplace({p.family, p.member}, 0.0);
    if (added) it->second = callbacks.parameters(p);
    return it->second;
  };
  auto predicted = [&](const SearchPoint& p) {
    auto [it, added] = predicted_cache.try_emplace({p.family, p.member}, 0.0);
    if (added) it->second = callbacks.predicted_bytes(p);
    return it->second;
  };

  const size_t families = sizes.size();
  // lo: largest member measured to fit (-1: none); hi: smallest measured not to (size: none).
  std::vector<int64_t> lo(families, -1);
  std::vector<int64_t> hi(families);
  for (size_t f = 0; f < families; ++f)
    hi[f] = static_cast<int64_t>(sizes[f]);

  SearchOutcome outcome;
  double scale = 1.0;
  while (static_cast<int>(outcome.steps.size()) < max_measurements) {
    std::optional<SearchPoint> choice;
    double choice_parameters = -1;
    for (size_t f = 0; f < families; ++f) {
      // Largest member in (lo, hi) predicted to fit; members at or below lo are known fits.
      int64_t first = lo[f] + 1, last = hi[f] - 1, found = lo[f];
      while (first <= last) {
        const int64_t mid = first + (last - first) / 2;
        const SearchPoint p{f, static_cast<size_t>(mid)};
        if (predicted(p) * scale <= budget_bytes) {
          found = mid;
          first = mid + 1;
        } else {
          last = mid - 1;
        }
      }
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
      for (size_t f = 0; f < families; ++f) {
        if (lo[f] >= 0 || hi[f] == 0) continue;
        const SearchPoint p{f, 0};
        if (!choice || parameters(p) < parameters(*choice)) choice = p;
      }
      if (!choice) break;  // every family's smallest member was measured not to fit
    } else if (static_cast<int64_t>(choice->member) == lo[choice->family]) {
      break;  // the best prediction is a size already measured to fit
    }
    SearchStep step;
    step.point = *choice;
    step.parameters = parameters(*choice);
    step.predicted_bytes = predicted(*choice);
    step.scale = scale;
    step.measured_bytes = callbacks.measured_bytes(*choice);
    step.fits = step.measured_bytes <= budget_bytes;
    if (step.predicted_bytes > 0) scale = step.measured_bytes / step.predicted_bytes;
    const auto member = static_cast<int64_t>(choice->member);
    if (step.fits) {
      lo[choice->family] = member;
      if (!outcome.best || step.parameters > parameters(*outcome.best)) outcome.best = *choice;
    } else {
      hi[choice->family] = member;
    }
    outcome.steps.push_back(step);
  }
  outcome.scale = scale;
  return outcome;
}

}  // namespace gpipe::tables
