// What a long run shows while it runs, and what it leaves behind.
//
// Why this file exists: a researcher watching a run on a terminal wants a live bar (step,
// samples/s, loss, ETA); a log file wants plain lines; an analysis wants every step as a JSON
// line. Progress draws the first or writes the second; MetricsLog appends the third, and on a
// resumed run drops what the interrupted run logged after its snapshot, so nothing repeats.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <string>

#include "gpipe/files.h"

namespace gpipe::train {

class Progress {
 public:
  // mode: auto (a bar when stderr is a terminal) | bar | log | off.
  Progress(const std::string& mode, int64_t total_steps, int64_t log_every);
  ~Progress();

  void step(int64_t step, int64_t epoch, double loss, double lr, int64_t samples);
  // A log line that does not tear the bar.
  void info(const std::string& line);
  void finish();

 private:
  void draw(int64_t step, int64_t epoch, double loss, double samples_per_s);

  bool bar_ = false;
  bool enabled_ = true;
  int64_t total_;
  int64_t log_every_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> window_;  // (time, samples)
};

class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens `path` for appending; with `resume_step` >= 0 first drops the lines of steps after it.
  // A path that is not a regular file, and a write that fails (a full disk), throw Error naming
  // it (files.h).
  MetricsLog(const std::string& path, int64_t resume_step);
  void write(const nlohmann::json& line);
  bool enabled() const { return out_.is_open(); }

 private:
  AppendFile out_;
};

}  // namespace gpipe::train
