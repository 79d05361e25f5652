// Transport: how activations travel forward and gradients backward between adjacent stages.
//
// Why this file exists: the stages never share an autograd graph, only messages. Keeping the
// exchange behind one interface lets the same executor drive stages that are threads of one
// process (LocalTransport, below: a mailbox) or separate processes and hosts (the c10d
// transport in distributed.h). A receiver moves what it receives to its own device itself.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "gpipe/activations.h"
#include "gpipe/schedule.h"

namespace gpipe {

enum class Direction { kForward, kBackward };

// Identifies one message of a step. A stage receives exactly one message per key and sender.
struct MessageKey {
  int64_t step = 0;
  int64_t microbatch = 0;
  Direction direction = Direction::kForward;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Sends `tensors` from stage `from` to stage `to` (forward: to = from + 1; backward: from - 1).
  virtual void send(int64_t from, int64_t to, const MessageKey& key, Activations tensors) = 0;
  // Blocks until the message arrives. Throws AbortedError once abort() has been called.
  virtual Activations recv(int64_t from, int64_t to, const MessageKey& key) = 0;
  // Fails every pending and future recv of the current step (a stage has failed).
  virtual void abort(const std::string& reason) = 0;
  // Forgets undelivered messages and the abort before a new step.
  virtual void reset() = 0;
  // Called by the executor before stage `stage` runs `actions` of step `step` (so a transport
  // can post its receives ahead of need) and after it (to finish its sends).
  virtual void begin_stage(int64_t stage, int64_t stages, const std::vector<Action>& actions,
                           int64_t step, bool training) {}
  virtual void end_stage(int64_t stage) {}
};

// In-process transport: a mailbox shared by the stage threads. Tensors are handed over as they
// are; the receiving stage copies them to its device.
class LocalTransport final : public Transport {
 public:
  void send(int64_t from, int64_t to, const MessageKey& key, Activations tensors) override;
  Activations recv(int64_t from, int64_t to, const MessageKey& key) override;
  void abort(const std::string& reason) override;
  void reset() override;

 private:
  using Address = std::tuple<int64_t, int64_t, int64_t, int64_t, int>;  // to, from, step, m, dir
  static Address address(int64_t from, int64_t to, const MessageKey& key);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<Address, Activations> mailbox_;
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace gpipe
