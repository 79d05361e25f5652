// Mailbox: the messages of a step that have arrived at a process and not yet been taken.
//
// Why this file exists: both transports (transport.h's LocalTransport between threads,
// distributed.h's ProcessGroupTransport between processes) end in the same place: a message
// lands under its key, and the stage that needs it blocks until it is there, unless the step is
// aborted. Written twice, the two copies had drifted in what an abort does to a waiting
// receiver. One mailbox keeps that rule in one place:
//
//   take(key) waits for key's message and its arrival time (a modelled link delivers late);
//   abort(reason) ends every wait, present and future, with AbortedError(reason), even where the
//   message is already there: a step that is being cancelled takes nothing more;
//   a `check` given to take runs every `poll` while it waits, outside the mailbox's lock, and
//   ends the wait by throwing (a failure reported elsewhere: another process, a receiver thread);
//   notify() runs those checks at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "gpipe/activations.h"

namespace gpipe {

enum class Direction { kForward, kBackward };

// Identifies one message of a step: from one virtual stage to its neighbour.
struct MessageKey {
  int64_t step = 0;
  int64_t from_stage = 0;
  int64_t to_stage = 0;
  int64_t microbatch = 0;
  Direction direction = Direction::kForward;

  bool operator<(const MessageKey& other) const {
    return std::tie(step, from_stage, to_stage, microbatch, direction) <
           std::tie(other.step, other.from_stage, other.to_stage, other.microbatch,
                    other.direction);
  }
};

class Mailbox {
 public:
  using Clock = std::chrono::steady_clock;

  // Leaves `tensors` under `key`, to be taken no earlier than `arrival` (default: now). A message
  // already there under `key` is replaced.
  void put(const MessageKey& key, Activations tensors, Clock::time_point arrival = {});
  // Blocks until the message `key` is there and its arrival time has passed, then takes it.
  // Throws AbortedError with abort()'s reason once abort() has been called. `check` (if any)
  // runs every `poll` while waiting, without the mailbox's lock, and ends the wait by throwing.
  Activations take(const MessageKey& key, const std::function<void()>& check = {},
                   std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  // Ends every wait, present and future, until reset(); the first reason is kept.
  void abort(const std::string& reason);
  // Wakes every waiter to run its check now.
  void notify();
  // Forgets every message and the abort, before a new step.
  void reset();

 private:
  struct Message {
    Activations tensors;
    Clock::time_point arrival;
  };

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<MessageKey, Message> messages_;
  bool aborted_ = false;
  std::string abort_reason_;
  uint64_t generation_ = 0;  // bumped by notify(): a waiter that saw another value checks
};

}  // namespace gpipe
