// Timeline: every action of every device, timed.
//
// Why this file exists: a pipeline's behaviour is only believable when it can be seen. Each F, B
// W, R (recompute), SEND and RECV is recorded with the device that ran it, its virtual stage, step
// and micro-batch; a step exports as Chrome trace JSON (Perfetto and chrome://tracing open it; one
// row per device), and the measured bubble fraction of a step is 1 - (mean over devices of busy
// time) / (step span).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "gpipe/files.h"

namespace gpipe {

struct TimelineEvent {
  int64_t device = 0;  // the device that ran it (its worker thread)
  std::string name;    // "F3", "B3", "W3", "R3"; "RECV_F3", "SEND_B3" for messages
  int64_t step = 0;
  int64_t microbatch = 0;
  double start_us = 0;  // since the timeline's origin
  double duration_us = 0;
  int64_t virtual_stage = -1;  // the action's virtual stage, when known
  bool communication = false;  // a SEND or RECV (waiting is not work: busy time skips it)

  double end_us() const { return start_us + duration_us; }
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline();

  // Thread-safe.
  void record(int64_t device, std::string name, int64_t step, int64_t microbatch,
              Clock::time_point start, Clock::time_point end, int64_t virtual_stage = -1,
              bool communication = false);
  void clear();
  std::vector<TimelineEvent> events() const;
  // Events of one step only.
  std::vector<TimelineEvent> events(int64_t step) const;

  // Labels for the trace's rows, one per device, e.g. "device 0 (cpu:0)".
  void set_device_names(std::vector<std::string> names);

  // Chrome trace JSON: {"traceEvents": [...], "displayTimeUnit": "ms"}.
  nlohmann::json chrome_trace() const;
  void write_chrome_trace(const std::string& path) const;

 private:
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<TimelineEvent> events_;
  std::vector<std::string> device_names_;
};

// Busy time of each of `devices` devices over `events` (compute only, not SEND/RECV).
std::vector<double> busy_us(const std::vector<TimelineEvent>& events, int64_t devices);
// Time from the first start to the last end of `events`.
double span_us(const std::vector<TimelineEvent>& events);
// 1 - mean(busy) / span; 0 for an empty list.
double bubble_fraction(const std::vector<TimelineEvent>& events, int64_t devices);

// Writes `json` to `path` with write_file (files.h): through a temporary file and a rename, every
// failure an Error naming the file.
void write_json_file(const std::string& path, const nlohmann::json& json, int indent = 2);

}  // namespace gpipe
