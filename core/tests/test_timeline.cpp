#include <gtest/gtest.h>

#include <fstream>

#include "gpipe/timing.h"
#include "test_util.h"

namespace gpipe::testing {
namespace {

TimelineEvent event(int64_t device, double start, double duration) {
  TimelineEvent e;
  e.device = device;
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
  timeline.set_device_names({"device 0 (cpu:0)", "device 1 (cpu:1)"});
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

// The helpers every timed figure goes through (gpipe/timing.h).
TEST(Timing, MedianAndStepsLastingATargetWithinTheirBounds) {
  EXPECT_EQ(median({}), 0);
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(steps_lasting(1000, 100, 5), 10);   // ten steps of 100 ms last a second
  EXPECT_EQ(steps_lasting(1000, 300, 5), 5);    // four would do, but at least five
  EXPECT_EQ(steps_lasting(1000, 1, 5), 50);     // a thousand would do, but at most 50
  EXPECT_EQ(steps_lasting(500, 1, 2, 8), 8);    // or the given most
  EXPECT_EQ(steps_lasting(1000, 0, 5), 50);     // an unknown step length: the most
  EXPECT_EQ(steps_lasting(1000, 333.0, 2), 4);  // rounded up
}

}  // namespace
}  // namespace gpipe::testing
