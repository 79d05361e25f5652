// The search for the largest model that fits a per-device memory budget, with a calibrated
// memory model and measured confirmation.
//
// Why this file exists: Table 1 asks for the largest model each configuration can train. The
// model sizes form families (AmoebaNet-D: one family per L, its members ordered by D;
// Transformer-L: one family ordered by L) in which memory grows with the member's index. The
// search keeps a scale factor between predicted and measured peaks, and repeats:
//
//   1. in every family, binary-search the largest member whose predicted peak x scale fits the
//      budget, between what was measured to fit and what was measured not to;
//   2. take the one with the most parameters; if it was measured to fit already, stop;
//   3. measure a real training step at that size, update the scale, record fit or not.
//
// The answer is always a size whose measured step fitted. The logic is independent of models
// and of memory (callbacks), so it is unit-tested with synthetic families.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gpipe::tables {

struct SearchPoint {
  size_t family = 0;
  size_t member = 0;
  bool operator==(const SearchPoint& other) const {
    return family == other.family && member == other.member;
  }
};

struct SearchCallbacks {
  // Number of members of each family (ascending memory within a family).
  std::vector<size_t> family_sizes;
  // Parameters of a member (what "largest" means).
  std::function<double(const SearchPoint&)> parameters;
  // Predicted largest per-device peak of a member, in bytes (not yet scaled).
  std::function<double(const SearchPoint&)> predicted_bytes;
  // Measured largest per-device peak of a member's real training step, in bytes.
  std::function<double(const SearchPoint&)> measured_bytes;
};

struct SearchStep {
  SearchPoint point;
  double parameters = 0;
  double predicted_bytes = 0;  // unscaled
  double scale = 1;            // the scale the point was chosen under
  double measured_bytes = 0;
  bool fits = false;
};

struct SearchOutcome {
  std::optional<SearchPoint> best;  // largest measured fit
  std::vector<SearchStep> steps;    // every measured step, in order
  double scale = 1;                 // final measured / predicted ratio
};

// Finds the member with the most parameters whose measured peak is <= budget_bytes, measuring at
// most `max_measurements` steps. Returns an outcome without `best` when even the smallest
// members measured do not fit (the caller reports that; see smallest-first below) or the
// measurement allowance ran out before any fit. When no member is predicted to fit, the smallest
// unmeasured first member (fewest parameters) is measured, so a too-pessimistic model cannot
// hide a fitting size.
SearchOutcome search_largest(const SearchCallbacks& callbacks, double budget_bytes,
                             int max_measurements);

}  // namespace gpipe::tables
