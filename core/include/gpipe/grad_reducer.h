// GradientReducer: the data-parallel gradient all-reduce, in buckets, overlapped with backward.
//
// Why this file exists: with R replicas of a pipeline every stage's gradients are summed over its
// replicas before the update. Summing them only after the whole backward leaves the links idle
// while the backward runs and the devices idle while the links run. As in PyTorch's DDP, the
// parameters are grouped into fixed buckets (about `bucket_bytes` each) in the order their
// gradients become final, and a communication thread sums each bucket as soon as every gradient
// in it is final, while the backward goes on; the step waits for the buckets only before the
// update.
//
// When is a gradient final: in the stage's last gradient action of the step. Without split
// backward that is B of the stage's last micro-batch; while it runs (`arm`), the post-hook of
// each parameter's gradient accumulator reports the parameter the moment autograd has added its
// last contribution (gpipe::Linear adds its own before the accumulator runs). Under zero-bubble
// schedules the weight gradients come in W, outside autograd, so a stage's parameters are
// reported together when its last W ends (`stage_done`, which also covers parameters no hook
// reported, such as unused ones).
//
//   device thread : ... B(M-2) | B(M-1): w4 w3 w2 w1 w0 |  (other stages' work) | wait | update
//   comm thread   :                     [bucket 0: w4 w3] [bucket 1: w2 w1 w0]  |
//                                        ^ starts as soon as w3 is final
//
// Buckets are built once, from the stages in descending order and each stage's parameters in
// reverse, and summed strictly in index order, so every replica issues the same collectives in
// the same order whatever order its hooks fire in.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpipe/stage.h"

namespace gpipe {

// The gradient all-reduce of the last step.
struct GradReduceStats {
  double reduce_ms = 0;   // the communication thread's time on the buckets (copy, sum, copy back)
  double exposed_ms = 0;  // how long the step waited for them after its schedule ended
  int64_t buckets = 0;
};

class GradientReducer {
 public:
  // Sums a flat bucket over the replicas in place; blocking; runs on the communication thread.
  using SumFn = std::function<void(torch::Tensor&)>;

  // `stages`: the stages this process holds. Throws ConfigError for bucket_bytes <= 0.
  GradientReducer(const std::vector<Stage*>& stages, int64_t bucket_bytes, SumFn sum);
  ~GradientReducer();  // cancels a step in flight and joins the communication thread
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // A new step: no gradient is final yet.
  void begin_step();
  // `stage`'s next gradient accumulations are its last of the step: hooks report them.
  void arm(int64_t stage);
  // Every gradient of `stage` is final.
  void stage_done(int64_t stage);
  // Waits until every bucket is summed and copied back; rethrows the communication thread's
  // failure.
  GradReduceStats finish();
  // A failed step: drops the buckets not started and waits for the one in flight.
  void cancel();

  int64_t num_buckets() const;
  // Parameters (as indices in the stages' reversed order) of each bucket, for tests.
  std::vector<std::vector<int64_t>> bucket_layout() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the accumulator hooks, which may outlive us
  std::thread thread_;
};

}  // namespace gpipe
