#include "gpipe/weight_grad.h"

#include <atomic>
#include <unordered_map>

namespace gpipe {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::unordered_map<int64_t, WeightGradQueue*>& registry() {
  static std::unordered_map<int64_t, WeightGradQueue*> queues;
  return queues;
}

}  // namespace

WeightGradQueue::WeightGradQueue() {
  static std::atomic<int64_t> next{1};
  token_ = next++;
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[token_] = this;
}

WeightGradQueue::~WeightGradQueue() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(token_);
}

void WeightGradQueue::run() {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work.swap(work_);
  }
  for (auto& fn : work)
    fn();
}

bool WeightGradQueue::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return work_.empty();
}

bool WeightGradQueue::defer(int64_t token, std::function<void()> work) {
  if (token == 0) return false;
  WeightGradQueue* queue = nullptr;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(token);
    if (it == registry().end()) return false;
    queue = it->second;
  }
  // The owning stage keeps the queue alive for as long as a backward can reach it.
  std::lock_guard<std::mutex> lock(queue->mutex_);
  if (!queue->deferring_) return false;
  queue->work_.push_back(std::move(work));
  return true;
}

}  // namespace gpipe
