// Timing helpers shared by the profiler, the table drivers and the tools.
//
// Why this file exists: every timed figure this project reports is the median of repeated runs
// on the steady clock, from layer profiles to loader throughput; one definition of each keeps
// them comparable.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace gpipe {

// The median: the middle value, or the mean of the two middle ones for an even count; 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

// Milliseconds since `start` on the steady clock.
inline double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace gpipe
