#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace gpipe::testing {
namespace {

TimelineEvent event(int64_t stage, double start, double duration) {
  TimelineEvent e;
  e.stage = stage;
  e.name = "F0";
  e.start_us = start;
  e.duration_us = duration;
  return e;
}

TEST(Timeline, BubbleFraction) {
  // Two stages, span 10: busy 6 and 4 -> mean 5 -> bubble 0.5.
  const std::vector<TimelineEvent> events{event(0, 0, 6), event(1, 6, 4)};
  EXPECT_DOUBLE_EQ(span_us(events), 10);
  EXPECT_DOUBLE_EQ(bubble_fraction(events, 2), 0.5);
  EXPECT_DOUBLE_EQ(bubble_fraction({}, 2), 0);
}

TEST(Timeline, ChromeTraceHasOneCompleteEventPerAction) {
  Timeline timeline;
  timeline.set_stage_names({"stage 0 (cpu:0)", "stage 1 (cpu:1)"});
  const auto t0 = Timeline::Clock::now();
  timeline.record(1, "B3", 2, 3, t0, t0 + std::chrono::microseconds(250));
  const auto trace = timeline.chrome_trace();
  int complete = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_EQ(e["name"], "B3");
      EXPECT_EQ(e["tid"], 1);
      EXPECT_EQ(e["args"]["step"], 2);
      EXPECT_EQ(e["args"]["microbatch"], 3);
      EXPECT_NEAR(e["dur"].get<double>(), 250, 1e-6);
    }
  }
  EXPECT_EQ(complete, 1);
  const auto path = ::testing::TempDir() + "/trace.json";
  timeline.write_chrome_trace(path);
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in), trace);
}

}  // namespace
}  // namespace gpipe::testing
