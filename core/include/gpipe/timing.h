// Timing helpers shared by the profiler, the table drivers and the tools.
//
// Why this file exists: every timed figure this project reports is the median of repeated runs
// on the steady clock, from layer profiles to loader throughput; one definition of each keeps
// them comparable.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace gpipe {

// The median: the middle value, or the mean of the two middle ones for an even count; 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

// How many steps of about `step_ms` to time so that they last about `target_ms`: at least
// `at_least` (a median of very few short steps is one scheduler hiccup from wrong) and at most
// `at_most` (a step predicted far too short must not run for minutes).
inline int steps_lasting(double target_ms, double step_ms, int at_least, int at_most = 50) {
  if (!(step_ms > 0)) return at_most;
  return static_cast<int>(std::clamp(std::ceil(target_ms / step_ms), static_cast<double>(at_least),
                                     static_cast<double>(at_most)));
}

// Milliseconds since `start` on the steady clock.
inline double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace gpipe
