#include "gpipe/timeline.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gpipe/errors.h"

namespace gpipe {

Timeline::Timeline() : origin_(Clock::now()) {}

void Timeline::record(int64_t device, std::string name, int64_t step, int64_t microbatch,
                      Clock::time_point start, Clock::time_point end, int64_t virtual_stage,
                      bool communication) {
  using us = std::chrono::duration<double, std::micro>;
  TimelineEvent event{device,
                      std::move(name),
                      step,
                      microbatch,
                      us(start - origin_).count(),
                      us(end - start).count(),
                      virtual_stage,
                      communication};
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(event));
}

void Timeline::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
}

std::vector<TimelineEvent> Timeline::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

std::vector<TimelineEvent> Timeline::events(int64_t step) const {
  std::vector<TimelineEvent> out;
  for (auto& e : events()) {
    if (e.step == step) out.push_back(std::move(e));
  }
  return out;
}

void Timeline::set_device_names(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_names_ = std::move(names);
}

nlohmann::json Timeline::chrome_trace() const {
  auto all = events();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    names = device_names_;
  }
  auto trace = nlohmann::json::array();
  for (size_t s = 0; s < names.size(); ++s) {
    trace.push_back({{"name", "thread_name"},
                     {"ph", "M"},
                     {"pid", 0},
                     {"tid", s},
                     {"args", {{"name", names[s]}}}});
  }
  for (const auto& e : all) {
    nlohmann::json args = {{"step", e.step}, {"microbatch", e.microbatch}};
    if (e.virtual_stage >= 0) args["virtual_stage"] = e.virtual_stage;
    trace.push_back({{"name", e.name},
                     {"cat", e.communication ? "communication" : "compute"},
                     {"ph", "X"},
                     {"ts", e.start_us},
                     {"dur", e.duration_us},
                     {"pid", 0},
                     {"tid", e.device},
                     {"args", args}});
  }
  return {{"traceEvents", trace}, {"displayTimeUnit", "ms"}};
}

void Timeline::write_chrome_trace(const std::string& path) const {
  write_json_file(path, chrome_trace(), -1);
}

std::vector<double> busy_us(const std::vector<TimelineEvent>& events, int64_t devices) {
  std::vector<double> busy(devices, 0.0);
  for (const auto& e : events) {
    if (e.device >= 0 && e.device < devices && !e.communication) busy[e.device] += e.duration_us;
  }
  return busy;
}

double span_us(const std::vector<TimelineEvent>& events) {
  if (events.empty()) return 0;
  double first = std::numeric_limits<double>::max(), last = 0;
  for (const auto& e : events) {
    first = std::min(first, e.start_us);
    last = std::max(last, e.end_us());
  }
  return last - first;
}

double bubble_fraction(const std::vector<TimelineEvent>& events, int64_t devices) {
  const double span = span_us(events);
  if (span <= 0 || devices < 1) return 0;
  double total = 0;
  for (double b : busy_us(events, devices))
    total += b;
  return 1.0 - total / static_cast<double>(devices) / span;
}

void write_json_file(const std::string& path, const nlohmann::json& json, int indent) {
  write_file(path, json.dump(indent) + "\n");
}

}  // namespace gpipe
