// LinkModel: the time a message between two devices takes, as latency plus bytes over bandwidth.
//
// Why this file exists: the simulator charges every copy between devices by this model, and the
// in-process transport can impose the same delay on real messages (LocalTransport's link), so a
// table projected under a link can be checked against a run measured under it. The scaled
// links keep the ratio of transfer to compute of an accelerator on a machine whose compute is
// far slower: bandwidth times the ratio of compute rates, latency divided by it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

// The copy between adjacent stages, timed in the unit of the costs it is used with (link_preset
// gives seconds; in_milliseconds() converts). Zero latency and bandwidth mean no cost.
struct LinkModel {
  double latency = 0;    // time per message
  double bandwidth = 0;  // bytes per unit of time; 0 means infinite
  // Bytes crossing boundary s -> s+1 per micro-batch (one entry per boundary between virtual
  // stages; the gradient going back has the same size). Empty means nothing to copy.
  std::vector<double> boundary_bytes;

  // Latency plus the bytes of `boundary` over the bandwidth.
  double transfer_time(int64_t boundary) const;
  // Latency plus `bytes` over the bandwidth.
  double transfer_time_of(double bytes) const;
  // True when every message is free (no latency, infinite bandwidth).
  bool free() const { return latency == 0 && bandwidth == 0; }
  // This link, timed in seconds, with its times in milliseconds.
  LinkModel in_milliseconds() const;
  // This link for compute `factor` times as fast as the one it was made for: bandwidth times
  // factor, latency divided by it (factor 0.01: a 100x slower machine gets a 100x slower link).
  LinkModel scaled(double factor) const;
};

// Documented link presets for projections, in seconds (bandwidth per direction, latency per
// message):
//   pcie    PCIe 3.0 x16 between GPUs without NVLink, as in GPipe's Table 3: 12 GB/s, 10 us
//   nvlink  NVLink 2 (two bricks between neighbouring V100s): 50 GB/s, 5 us
//   tpu     TPU v3 inter-core interconnect: 70 GB/s, 2 us
//   none    no copy cost (stages share memory, as CPU virtual devices do)
// Throws ConfigError for another name (the scaled links need a factor: scaled()).
LinkModel link_preset(const std::string& name);

}  // namespace gpipe
