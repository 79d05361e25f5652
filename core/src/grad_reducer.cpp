// GradientReducer (grad_reducer.h): the buckets, the accumulator hooks that fill them and the
// communication thread that sums them in index order.
#include "gpipe/grad_reducer.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <set>

#include "gpipe/errors.h"
#include "gpipe/timing.h"

namespace gpipe {

struct GradientReducer::State {
  struct Param {
    torch::Tensor tensor;
    int64_t stage = 0;
    int64_t bucket = 0;
  };
  struct Bucket {
    std::vector<int64_t> params;
    torch::Tensor flat;  // kept for the reducer's life: one allocation, never freed on Gloo's side
    int64_t pending = 0;
  };

  SumFn sum;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // keeps the hooks alive

  std::mutex mutex;
  std::condition_variable cv;
  std::vector<bool> ready;
  std::set<int64_t> armed;
  int64_t next = 0;  // the bucket the thread sums next
  bool active = false;
  bool in_flight = false;
  bool stop = false;
  std::exception_ptr error;
  double reduce_ms = 0;

  // mutex held
  void mark(int64_t id) {
    if (ready[id]) return;
    ready[id] = true;
    if (--buckets[params[id].bucket].pending == 0) cv.notify_all();
  }
  void mark_stage(int64_t stage) {
    for (size_t id = 0; id < params.size(); ++id) {
      if (params[id].stage == stage) mark(static_cast<int64_t>(id));
    }
  }
  void on_accumulated(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex);
    if (active && armed.count(params[id].stage) != 0) mark(id);
  }
  void sum_bucket(Bucket& bucket);
  void run();
};

void GradientReducer::State::sum_bucket(Bucket& bucket) {
  int64_t offset = 0;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> pieces;  // (grad, its slice of flat)
  for (int64_t id : bucket.params) {
    const auto& p = params[id].tensor;
    auto slice = bucket.flat.narrow(0, offset, p.numel());
    offset += p.numel();
    const auto& grad = p.grad();
    if (grad.defined()) {
      slice.copy_(grad.reshape({-1}));
    } else {
      slice.zero_();  // a parameter this replica did not use still takes part in the sum
    }
    pieces.emplace_back(grad, slice);
  }
  sum(bucket.flat);
  for (auto& [grad, slice] : pieces) {
    if (grad.defined()) grad.copy_(slice.view_as(grad));
  }
}

void GradientReducer::State::run() {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    cv.wait(lock, [&] {
      return stop || (active && error == nullptr && next < static_cast<int64_t>(buckets.size()) &&
                      buckets[next].pending == 0);
    });
    if (stop) return;
    Bucket& bucket = buckets[next];
    in_flight = true;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr failure;
    try {
      sum_bucket(bucket);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    reduce_ms += elapsed_ms(start);
    in_flight = false;
    if (failure != nullptr) {
      error = failure;
    } else {
      ++next;
    }
    cv.notify_all();
  }
}

GradientReducer::GradientReducer(const std::vector<Stage*>& stages, int64_t bucket_bytes, SumFn sum)
    : state_(std::make_shared<State>()) {
  GPIPE_CHECK(bucket_bytes > 0, ConfigError, "the gradient bucket size must be positive, got ",
              bucket_bytes, " bytes (PipelineOptions::bucket_mb takes MiB, e.g. 25)");
  state_->sum = std::move(sum);
  std::vector<Stage*> order(stages.begin(), stages.end());
  std::sort(order.begin(), order.end(),
            [](const Stage* a, const Stage* b) { return a->index() > b->index(); });
  int64_t bucket_size = 0;
  auto& buckets = state_->buckets;
  std::set<const void*> seen;  // a parameter shared by two stages is summed once
  for (const Stage* stage : order) {
    auto parameters = stage->parameters();
    std::reverse(parameters.begin(), parameters.end());
    for (const auto& p : parameters) {
      if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      const bool fits = !buckets.empty() && bucket_size < bucket_bytes &&
                        buckets.back().flat.scalar_type() == p.scalar_type() &&
                        buckets.back().flat.device() == p.device();
      if (!fits) {
        buckets.emplace_back();
        buckets.back().flat = torch::empty({0}, p.options());
        bucket_size = 0;
      }
      const auto id = static_cast<int64_t>(state_->params.size());
      state_->params.push_back({p, stage->index(), static_cast<int64_t>(buckets.size()) - 1});
      buckets.back().params.push_back(id);
      bucket_size += p.numel() * static_cast<int64_t>(p.element_size());
      auto accumulator = torch::autograd::impl::grad_accumulator(p);
      std::weak_ptr<State> weak = state_;
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [weak, id](const torch::autograd::variable_list& outputs,
                     const torch::autograd::variable_list&) {
            if (auto state = weak.lock()) state->on_accumulated(id);
            return outputs;
          }));
      state_->accumulators.push_back(std::move(accumulator));
    }
  }
  for (auto& bucket : buckets) {
    int64_t numel = 0;
    for (int64_t id : bucket.params)
      numel += state_->params[id].tensor.numel();
    bucket.flat = torch::empty({numel}, bucket.flat.options());
  }
  state_->ready.assign(state_->params.size(), false);
  thread_ = std::thread([state = state_] { state->run(); });
}

GradientReducer::~GradientReducer() {
  cancel();
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->cv.notify_all();
  thread_.join();
}

void GradientReducer::begin_step() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return !state_->in_flight; });
  state_->ready.assign(state_->params.size(), false);
  for (auto& bucket : state_->buckets)
    bucket.pending = static_cast<int64_t>(bucket.params.size());
  state_->armed.clear();
  state_->next = 0;
  state_->error = nullptr;
  state_->reduce_ms = 0;
  state_->active = true;
}

void GradientReducer::arm(int64_t stage) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->armed.insert(stage);
}

void GradientReducer::stage_done(int64_t stage) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->active) state_->mark_stage(stage);
}

GradReduceStats GradientReducer::finish() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  GPIPE_CHECK(state_->active, ConfigError, "GradientReducer::finish without begin_step");
  // The schedule has ended, so every gradient is final, whatever the hooks reported.
  for (size_t id = 0; id < state_->params.size(); ++id)
    state_->mark(static_cast<int64_t>(id));
  const auto start = std::chrono::steady_clock::now();
  state_->cv.wait(lock, [&] {
    return state_->error != nullptr || state_->next == static_cast<int64_t>(state_->buckets.size());
  });
  GradReduceStats stats;
  stats.exposed_ms = elapsed_ms(start);
  stats.reduce_ms = state_->reduce_ms;
  stats.buckets = static_cast<int64_t>(state_->buckets.size());
  state_->active = false;
  if (state_->error != nullptr) {
    auto error = state_->error;
    state_->error = nullptr;
    std::rethrow_exception(error);
  }
  return stats;
}

void GradientReducer::cancel() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->active = false;
  state_->cv.wait(lock, [&] { return !state_->in_flight; });
}

int64_t GradientReducer::num_buckets() const {
  return static_cast<int64_t>(state_->buckets.size());
}

std::vector<std::vector<int64_t>> GradientReducer::bucket_layout() const {
  std::vector<std::vector<int64_t>> layout;
  for (const auto& bucket : state_->buckets)
    layout.push_back(bucket.params);
  return layout;
}

}  // namespace gpipe
