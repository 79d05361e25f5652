// Runs one function on several threads at once and reports the first failure.
//
// Why this file exists: the tools that do several things side by side (dataset_info's scan over
// worker threads, the planner's data-parallel replicas measured at once) need the same few lines:
// start n - 1 threads, run the first share on the calling thread, join them all, and rethrow what
// failed instead of letting an exception end the process from inside a thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace gpipe {

// Calls fn(0), ..., fn(n - 1) at once, fn(0) on the calling thread. When all have returned,
// rethrows the exception of the lowest index that threw, if any.
inline void run_parallel(int64_t n, const std::function<void(int64_t)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max<int64_t>(n, 0)));
  auto guarded = [&](int64_t i) {
    try {
      fn(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int64_t i = 1; i < n; ++i)
    threads.emplace_back(guarded, i);
  if (n > 0) guarded(0);
  for (auto& thread : threads)
    thread.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace gpipe
