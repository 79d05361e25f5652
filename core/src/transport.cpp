#include "gpipe/transport.h"

#include "gpipe/errors.h"

namespace gpipe {

LocalTransport::Address LocalTransport::address(const MessageKey& key) {
  return {key.from_stage, key.to_stage, key.step, key.microbatch, static_cast<int>(key.direction)};
}

void LocalTransport::send(int64_t /*from*/, int64_t /*to*/, const MessageKey& key,
                          Activations tensors) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mailbox_[address(key)] = std::move(tensors);
  }
  cv_.notify_all();
}

Activations LocalTransport::recv(int64_t /*from*/, int64_t /*to*/, const MessageKey& key) {
  const auto where = address(key);
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return aborted_ || mailbox_.count(where) > 0; });
  if (aborted_) throw AbortedError(abort_reason_);
  auto node = mailbox_.extract(where);
  return std::move(node.mapped());
}

void LocalTransport::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) abort_reason_ = reason;
    aborted_ = true;
  }
  cv_.notify_all();
}

void LocalTransport::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  mailbox_.clear();
  aborted_ = false;
  abort_reason_.clear();
}

}  // namespace gpipe
