#include "gpipe/mailbox.h"

#include <algorithm>

#include "gpipe/errors.h"

namespace gpipe {

void Mailbox::put(const MessageKey& key, Activations tensors, Clock::time_point arrival) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    messages_[key] = Message{std::move(tensors), arrival};
  }
  cv_.notify_all();
}

Activations Mailbox::take(const MessageKey& key, const std::function<void()>& check,
                          std::chrono::milliseconds poll) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (aborted_) throw AbortedError(abort_reason_);
    const auto found = messages_.find(key);
    if (found != messages_.end()) {
      const auto arrival = found->second.arrival;
      if (Clock::now() >= arrival) {
        auto message = std::move(found->second.tensors);
        messages_.erase(found);
        return message;
      }
      // A modelled link delivers it later; an abort meanwhile ends the wait.
      cv_.wait_until(lock, arrival, [&] { return aborted_; });
      continue;
    }
    // Checks run unlocked; a notify() meanwhile changes the generation, and the next round
    // checks again instead of sleeping a whole poll.
    const uint64_t seen = generation_;
    if (check) {
      lock.unlock();
      check();
      lock.lock();
    }
    const auto ready = [&] { return aborted_ || generation_ != seen || messages_.count(key) > 0; };
    if (check) {
      cv_.wait_for(lock, poll, ready);
    } else {
      cv_.wait(lock, ready);
    }
  }
}

void Mailbox::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) abort_reason_ = reason;
    aborted_ = true;
  }
  cv_.notify_all();
}

void Mailbox::notify() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
  }
  cv_.notify_all();
}

void Mailbox::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  messages_.clear();
  aborted_ = false;
  abort_reason_.clear();
}

}  // namespace gpipe
