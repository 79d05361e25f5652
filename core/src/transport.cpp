#include "gpipe/transport.h"

#include <algorithm>
#include <cmath>

#include "gpipe/errors.h"

namespace gpipe {

double LinkModel::transfer_time(int64_t boundary) const {
  double bytes = 0;
  if (boundary >= 0 && boundary < static_cast<int64_t>(boundary_bytes.size())) {
    bytes = boundary_bytes[boundary];
  }
  return transfer_time_of(bytes);
}

double LinkModel::transfer_time_of(double bytes) const {
  return latency + (bandwidth > 0 ? bytes / bandwidth : 0.0);
}

LinkModel LinkModel::in_milliseconds() const {
  LinkModel link = *this;
  link.latency = latency * 1e3;      // ms per message
  link.bandwidth = bandwidth / 1e3;  // bytes per ms
  return link;
}

LinkModel LinkModel::scaled(double factor) const {
  GPIPE_CHECK(factor > 0 && std::isfinite(factor), ConfigError,
              "a link's scale factor must be finite and > 0, got ", factor);
  LinkModel link = *this;
  link.latency = latency / factor;
  link.bandwidth = bandwidth * factor;
  return link;
}

LinkModel link_preset(const std::string& name) {
  LinkModel link;
  if (name == "pcie") {
    link.bandwidth = 12e9;
    link.latency = 10e-6;
  } else if (name == "nvlink") {
    link.bandwidth = 50e9;
    link.latency = 5e-6;
  } else if (name == "tpu") {
    link.bandwidth = 70e9;
    link.latency = 2e-6;
  } else if (name != "none") {
    throw ConfigError(c10::str("unknown link '", name, "': expected pcie, nvlink, tpu or none"));
  }
  return link;
}

void LocalTransport::send(int64_t from, int64_t to, const MessageKey& key, Activations tensors) {
  auto arrival = Clock::now();
  if (from != to && !link_.free()) {
    double bytes = 0;
    for (const auto& t : tensors) {
      if (t.defined()) bytes += static_cast<double>(t.numel() * t.element_size());
    }
    const auto transfer = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(link_.transfer_time_of(bytes)));
    std::lock_guard<std::mutex> lock(mutex_);
    auto& free = link_free_[{from, to}];
    arrival = std::max(arrival, free) + transfer;
    free = arrival;
  }
  mailbox_.put(key, std::move(tensors), arrival);
}

Activations LocalTransport::recv(int64_t /*from*/, int64_t /*to*/, const MessageKey& key) {
  return mailbox_.take(key);
}

void LocalTransport::abort(const std::string& reason) {
  mailbox_.abort(reason);
}

void LocalTransport::reset() {
  mailbox_.reset();
  std::lock_guard<std::mutex> lock(mutex_);
  link_free_.clear();
}

}  // namespace gpipe
