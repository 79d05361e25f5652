#include "train/progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "gpipe/errors.h"
#include "gpipe/files.h"

namespace gpipe::train {
namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<int64_t>(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(text, sizeof(text), "%02lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return text;
}

}  // namespace

Progress::Progress(const std::string& mode, int64_t total_steps, int64_t log_every)
    : total_(total_steps), log_every_(std::max<int64_t>(log_every, 1)) {
  GPIPE_CHECK(mode == "auto" || mode == "bar" || mode == "log" || mode == "off", ConfigError,
              "unknown --progress '", mode, "': expected auto, bar, log or off");
  enabled_ = mode != "off";
  bar_ = mode == "bar" || (mode == "auto" && isatty(STDERR_FILENO));
}

Progress::~Progress() {
  finish();
}

void Progress::step(int64_t step, int64_t epoch, double loss, double lr, int64_t samples) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  window_.emplace_back(now, samples);
  while (window_.size() > 50)
    window_.pop_front();
  double per_s = 0;
  if (window_.size() >= 2) {
    int64_t n = 0;
    for (size_t i = 1; i < window_.size(); ++i)
      n += window_[i].second;
    const double dt =
        std::chrono::duration<double>(window_.back().first - window_.front().first).count();
    per_s = dt > 0 ? n / dt : 0;
  }
  if (bar_) {
    if (step == total_ || now - last_draw_ > std::chrono::milliseconds(100)) {
      draw(step, epoch, loss, per_s);
      last_draw_ = now;
    }
  } else if (step % log_every_ == 0 || step == total_) {
    spdlog::info("step {}/{}  epoch {}  loss {:.4f}  lr {:.4g}  {:.1f} samples/s", step, total_,
                 epoch, loss, lr, per_s);
  }
}

void Progress::draw(int64_t step, int64_t epoch, double loss, double samples_per_s) {
  constexpr int kWidth = 30;
  const double done = total_ > 0 ? static_cast<double>(step) / static_cast<double>(total_) : 0.0;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(filled, '=');
  if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
  double eta = std::nan("");
  if (window_.size() >= 2) {
    const double dt =
        std::chrono::duration<double>(window_.back().first - window_.front().first).count();
    const double per_step = dt / static_cast<double>(window_.size() - 1);
    eta = per_step * static_cast<double>(total_ - step);
  }
  std::fprintf(stderr, "\r\033[Kepoch %lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  ETA %s",
               static_cast<long long>(epoch), bar.c_str(), static_cast<long long>(step),
               static_cast<long long>(total_), loss, samples_per_s, clock_text(eta).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::info(const std::string& line) {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  spdlog::info("{}", line);
}

void Progress::finish() {
  if (drawn_) {
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
    drawn_ = false;
  }
}

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  if (resume_step >= 0 && std::filesystem::exists(path)) {
    std::string kept;
    std::istringstream in(read_file(path, "--metrics"));
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) continue;  // a torn last line of a killed run
      if (j.value("step", int64_t{0}) <= resume_step) kept += line + "\n";
    }
    write_file(path, kept);
  }
  out_ = AppendFile(path, /*truncate=*/resume_step < 0);
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!out_.is_open()) return;
  out_.write(line.dump() + "\n");
}

}  // namespace gpipe::train
