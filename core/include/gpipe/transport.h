// Transport: how activations travel forward and gradients backward between adjacent stages.
//
// Why this file exists: the stages never share an autograd graph, only messages. Keeping the
// exchange behind one interface lets the same executor drive stages that are threads of one
// process (LocalTransport, below: a mailbox) or separate processes and hosts (the c10d
// transport in distributed.h). A receiver moves what it receives to its own device itself.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "gpipe/activations.h"
#include "gpipe/link.h"
#include "gpipe/mailbox.h"
#include "gpipe/schedule.h"

namespace gpipe {

class Transport {
 public:
  virtual ~Transport() = default;
  // Sends `tensors` from device `from` to device `to` (the same device is allowed: the message
  // is then delivered locally).
  virtual void send(int64_t from, int64_t to, const MessageKey& key, Activations tensors) = 0;
  // Blocks until the message arrives. Throws AbortedError once abort() has been called, even
  // where the message has arrived (mailbox.h).
  virtual Activations recv(int64_t from, int64_t to, const MessageKey& key) = 0;
  // Fails every pending and future recv of the current step (a stage has failed).
  virtual void abort(const std::string& reason) = 0;
  // Forgets undelivered messages and the abort before a new step.
  virtual void reset() = 0;
  // Called by the executor before device `device` runs its list of the lowered `schedule` in
  // step `step` (so a transport can post its receives ahead of need, in the order the peers
  // send) and after it (to finish its sends).
  virtual void begin_step(int64_t device, const Schedule& schedule, int64_t step) {}
  virtual void end_step(int64_t device) {}
};

// In-process transport: a mailbox (mailbox.h) shared by the stage threads. Tensors are handed
// over as they are; the receiving stage copies them to its device. With a link (in seconds;
// link.h), each message between two devices arrives as the simulator says it would: the link of a
// (from, to) pair carries one message at a time, taking latency + bytes / bandwidth, and a receiver
// waits for the arrival; the sender never waits. Messages within one device stay free.
class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(LinkModel link = {}) : link_(std::move(link)) {}
  void send(int64_t from, int64_t to, const MessageKey& key, Activations tensors) override;
  Activations recv(int64_t from, int64_t to, const MessageKey& key) override;
  void abort(const std::string& reason) override;
  void reset() override;

 private:
  using Clock = Mailbox::Clock;

  LinkModel link_;
  Mailbox mailbox_;
  std::mutex mutex_;                                                    // guards link_free_
  std::map<std::pair<int64_t, int64_t>, Clock::time_point> link_free_;  // (from, to) devices
};

}  // namespace gpipe
