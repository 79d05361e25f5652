// Deferred weight gradients: what lets a backward split into B and W.
//
// Why this file exists: zero-bubble schedules run the input-gradient half of a backward (B) on
// the critical path and the weight-gradient half (W) later, in what would have been a bubble.
// A stage gives each micro-batch one WeightGradQueue; while a split B runs, layers that can
// split (gpipe::Linear) push their weight-gradient work into the queue of the micro-batch whose
// forward created them, and W runs it. Layers that cannot split (convolutions, BatchNorm) do all
// their work in B, and their W is empty. The queue is found by a token recorded at forward time
// rather than by the calling thread, because CUDA autograd runs backward on its own threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace gpipe {

class WeightGradQueue {
 public:
  WeightGradQueue();
  ~WeightGradQueue();
  WeightGradQueue(const WeightGradQueue&) = delete;
  WeightGradQueue& operator=(const WeightGradQueue&) = delete;

  // A process-unique token; 0 is never used.
  int64_t token() const { return token_; }
  // While deferring, push() accepts work; otherwise the caller computes at once.
  void set_deferring(bool on) { deferring_ = on; }
  // Runs everything pushed so far, in order, and forgets it.
  void run();
  bool empty() const;

  // Defers `work` into the queue with `token` if it exists and is deferring; returns false (the
  // caller then computes now) otherwise.
  static bool defer(int64_t token, std::function<void()> work);

 private:
  int64_t token_;
  std::atomic<bool> deferring_{false};
  mutable std::mutex mutex_;
  std::vector<std::function<void()>> work_;
};

}  // namespace gpipe
