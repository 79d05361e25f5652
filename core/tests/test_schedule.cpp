// Schedules as data: their shape, validity, and the in-flight bound of 1F1B.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::testing {
namespace {

std::string render(const std::vector<Action>& actions) {
  std::string out;
  for (const auto& a : actions)
    out += to_string(a) + " ";
  return out;
}

TEST(Schedule, GPipeIsAllForwardsThenAllBackwardsLastFirst) {
  const auto s = make_schedule(ScheduleKind::kGPipe, 3, 4);
  for (const auto& stage : s.actions)
    EXPECT_EQ(render(stage), "F0 F1 F2 F3 B3 B2 B1 B0 ");
}

TEST(Schedule, OneFOneBMatchesTheDrawing) {
  const auto s = make_schedule(ScheduleKind::k1F1B, 3, 4);
  EXPECT_EQ(render(s.actions[0]), "F0 F1 F2 B0 F3 B1 B2 B3 ");
  EXPECT_EQ(render(s.actions[1]), "F0 F1 B0 F2 B1 F3 B2 B3 ");
  EXPECT_EQ(render(s.actions[2]), "F0 B0 F1 B1 F2 B2 F3 B3 ");
}

TEST(Schedule, InflightBound) {
  EXPECT_EQ(peak_inflight(make_schedule(ScheduleKind::kGPipe, 4, 8)),
            (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(peak_inflight(make_schedule(ScheduleKind::k1F1B, 4, 8)),
            (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(peak_inflight(make_schedule(ScheduleKind::k1F1B, 4, 2)),
            (std::vector<int64_t>{2, 2, 2, 1}));
}

TEST(Schedule, EveryGeneratedScheduleIsValid) {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int64_t K = 1; K <= 6; ++K) {
      for (int64_t M = 1; M <= 9; ++M) {
        EXPECT_NO_THROW(validate_schedule(make_schedule(kind, K, M))) << K << " " << M;
      }
    }
  }
  EXPECT_NO_THROW(validate_schedule(make_forward_schedule(3, 5), /*forward_only=*/true));
}

TEST(Schedule, ValidationCatchesBrokenLists) {
  auto s = make_schedule(ScheduleKind::kGPipe, 2, 2);
  s.actions[1].pop_back();
  EXPECT_THROW(validate_schedule(s), ConfigError);  // B0 missing

  auto early = make_schedule(ScheduleKind::kGPipe, 2, 2);
  std::swap(early.actions[0][0], early.actions[0][3]);  // B0 before F0
  EXPECT_THROW(validate_schedule(early), ConfigError);

  // Stage 0 wants B0 before F1 while stage 1 needs F1 before it can finish B0: deadlock.
  Schedule deadlock{2, 2, {}};
  deadlock.actions.push_back({{ActionKind::kForward, 0},
                              {ActionKind::kBackward, 0},
                              {ActionKind::kForward, 1},
                              {ActionKind::kBackward, 1}});
  deadlock.actions.push_back({{ActionKind::kForward, 0},
                              {ActionKind::kForward, 1},
                              {ActionKind::kBackward, 1},
                              {ActionKind::kBackward, 0}});
  try {
    validate_schedule(deadlock);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }

  auto wrong_k = make_schedule(ScheduleKind::kGPipe, 2, 2);
  wrong_k.stages = 3;
  EXPECT_THROW(validate_schedule(wrong_k), ConfigError);
  EXPECT_THROW(make_schedule(ScheduleKind::kGPipe, 0, 2), ConfigError);
  EXPECT_THROW(make_schedule(ScheduleKind::k1F1B, 2, 0), ConfigError);
}

}  // namespace
}  // namespace gpipe::testing
