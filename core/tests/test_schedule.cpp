// Schedules as data: the drawings in schedule.h, validity of every generated schedule, the
// lowering's messages and recomputes, the deadlock check, and the in-flight bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "source_dir.h"  // generated: GPIPE_SOURCE_DIR
#include "test_util.h"

namespace gpipe::testing {
namespace {

std::string render(const std::vector<Action>& actions) {
  std::string out;
  for (const auto& a : actions)
    out += to_string(a) + " ";
  return out;
}

// The drawings of schedule.h, in the order they appear: blocks of "//   sN ..." lines.
std::vector<std::vector<std::string>> header_drawings() {
  std::ifstream in(std::string(GPIPE_SOURCE_DIR) + "/core/include/gpipe/schedule.h");
  EXPECT_TRUE(in.good()) << "cannot read schedule.h";
  std::vector<std::vector<std::string>> blocks;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    const bool row = line.rfind("//   s", 0) == 0;
    if (row && !inside) blocks.emplace_back();
    if (row) blocks.back().push_back(line.substr(5));
    inside = row;
  }
  return blocks;
}

TEST(Schedule, HeaderDrawingsAreWhatTheGeneratorsDo) {
  const auto drawings = header_drawings();
  const std::vector<Schedule> drawn = {
      make_schedule(ScheduleKind::kGPipe, 3, 4),
      make_schedule(ScheduleKind::k1F1B, 3, 4),
      make_schedule(ScheduleKind::kInterleaved1F1B, 2, 4, 2),
      make_schedule(ScheduleKind::kZBH1, 3, 4),
      make_schedule(ScheduleKind::kZBV, 2, 2, 2),
      make_schedule(ScheduleKind::kZBH2, 3, 6),
      make_schedule(ScheduleKind::kLoopedBFS, 2, 4, 2),
      make_schedule(ScheduleKind::kDualPipeV, 2, 4, 2),
      make_schedule(ScheduleKind::kVHalf, 2, 4, 2),
  };
  ASSERT_EQ(drawings.size(), drawn.size());
  for (size_t i = 0; i < drawn.size(); ++i) {
    EXPECT_EQ(draw_schedule(drawn[i]), drawings[i]) << "drawing of " << to_string(drawn[i].kind);
  }
}

TEST(Schedule, GPipeIsAllForwardsThenAllBackwardsLastFirst) {
  const auto s = make_schedule(ScheduleKind::kGPipe, 3, 4);
  for (const auto& device : s.actions)
    EXPECT_EQ(render(device), "F0 F1 F2 F3 B3 B2 B1 B0 ");
}

TEST(Schedule, ZBH1DefersEachStagesWeightsByItsIndex) {
  const auto s = make_schedule(ScheduleKind::kZBH1, 3, 4);
  EXPECT_EQ(render(s.actions[0]), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3 ");
  EXPECT_EQ(render(s.actions[2]), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 ");
}

TEST(Schedule, InflightBounds) {
  EXPECT_EQ(peak_inflight(make_schedule(ScheduleKind::kGPipe, 4, 8)),
            (std::vector<double>{8, 8, 8, 8}));
  EXPECT_EQ(peak_inflight(make_schedule(ScheduleKind::k1F1B, 4, 8)),
            (std::vector<double>{4, 3, 2, 1}));
  EXPECT_EQ(peak_inflight(make_schedule(ScheduleKind::k1F1B, 4, 2)),
            (std::vector<double>{2, 2, 2, 1}));
  const auto peak = [](ScheduleKind kind, int64_t K, int64_t M) {
    const auto peaks = peak_inflight(make_schedule(kind, K, M, default_virtual_stages(kind)));
    return *std::max_element(peaks.begin(), peaks.end());
  };
  for (int64_t M : {4, 8, 16}) {
    // Zero bubble keeps 1F1B's peak over the devices; zb-h2 takes the paper's 2K-1.
    EXPECT_LE(peak(ScheduleKind::kZBH1, 4, M), 4.0 + 1e-9) << M;
    EXPECT_LE(peak(ScheduleKind::kZBV, 4, M), 4.0 + 1e-9) << M;
    EXPECT_LE(peak(ScheduleKind::kZBH2, 4, M), 7.0 + 1e-9) << M;
    // DualPipeV: 1F1B's K and half a micro-batch (DeepSeek's table: PP + 1 half-stage ones).
    EXPECT_LE(peak(ScheduleKind::kDualPipeV, 4, std::max<int64_t>(M, 8)), 4.5 + 1e-9) << M;
    // looped-bfs holds every micro-batch, as gpipe.
    EXPECT_DOUBLE_EQ(peak(ScheduleKind::kLoopedBFS, 4, M), static_cast<double>(M));
  }
  // v-half: at most half of 1F1B's K, rounded up, from K = 3 on (at K = 2, 1F1B's 2).
  EXPECT_DOUBLE_EQ(peak(ScheduleKind::kVHalf, 2, 8), 2.0);
  for (int64_t K = 3; K <= 16; ++K) {
    for (int64_t M : {4, 8, 16, 32})
      EXPECT_LE(peak(ScheduleKind::kVHalf, K, M), static_cast<double>((K + 1) / 2))
          << "K=" << K << " M=" << M;
  }
}

TEST(Schedule, EveryGeneratedScheduleLowersAndValidates) {
  int lowered = 0;
  for (auto kind : all_schedule_kinds()) {
    for (int64_t v : {1, 2, 3}) {
      for (int64_t K = 1; K <= 6; ++K) {
        for (int64_t M = 1; M <= 13; ++M) {
          if (!schedule_shape_error(kind, K, M, v).empty()) continue;
          ++lowered;
          for (auto mode : {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever}) {
            EXPECT_NO_THROW(lower(make_schedule(kind, K, M, v), mode))
                << to_string(kind) << " K=" << K << " M=" << M << " v=" << v;
          }
          EXPECT_NO_THROW(lower(make_forward_schedule(kind, K, M, v), Checkpoint::kNever));
        }
      }
    }
  }
  EXPECT_GT(lowered, 9 * 5 * 10);  // each kind at many shapes, not a few
}

TEST(Schedule, BadCombinationsNameTheValues) {
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kZBV, 1, 4, 2), "K=1");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kZBV, 4, 8, 3), "v=3");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kInterleaved1F1B, 4, 6, 2), "M=6");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kGPipe, 2, 4, 2), "v=2");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kGPipe, 0, 2), "K=0");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::k1F1B, 2, 0), "M=0");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kDualPipeV, 3, 5, 2), "M=5");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kVHalf, 1, 4, 2), "K=1");
  EXPECT_CONFIG_ERROR(make_schedule(ScheduleKind::kLoopedBFS, 2, 4, 0), "got 0");
  EXPECT_CONFIG_ERROR(parse_schedule_kind("zb-h3"), "zb-h3");
  EXPECT_EQ(schedule_shape_error(ScheduleKind::kDualPipeV, 3, 6, 2), "");
  EXPECT_NE(schedule_shape_error(ScheduleKind::kDualPipeV, 3, 5, 2).find("use M=6"),
            std::string::npos);
  // Checked alone, before a balance is cut into K x v stages.
  EXPECT_CONFIG_ERROR(check_virtual_stages(ScheduleKind::kZBV, 3), "v=3");
  EXPECT_CONFIG_ERROR(check_virtual_stages(ScheduleKind::kZBH1, 2), "v=2");
  EXPECT_CONFIG_ERROR(check_virtual_stages(ScheduleKind::kInterleaved1F1B, 0), "got 0");
  EXPECT_NO_THROW(check_virtual_stages(ScheduleKind::kInterleaved1F1B, 4));
}

TEST(Lowering, RecomputeBeforeTheGradientAndMessagesAroundEachAction) {
  const auto s = lower(make_schedule(ScheduleKind::kGPipe, 2, 2), Checkpoint::kExceptLast);
  EXPECT_EQ(render(s.actions[0]),
            "F0 SEND_F0(0->1) F1 SEND_F1(0->1) RECV_B1(0<-1) B1 R0 RECV_B0(0<-1) B0 ");
  EXPECT_EQ(render(s.actions[1]),
            "RECV_F0(1<-0) F0 RECV_F1(1<-0) F1 B1 SEND_B1(1->0) R0 B0 SEND_B0(1->0) ");
  EXPECT_TRUE(s.actions[0][0].checkpoint);
  EXPECT_FALSE(s.actions[0][2].checkpoint);  // the last micro-batch keeps its activations
}

TEST(Lowering, ZBVTurnsOnTheLastDeviceThroughALocalMessage) {
  const auto s = lower(make_schedule(ScheduleKind::kZBV, 2, 2, 2), Checkpoint::kNever);
  EXPECT_EQ(s.device_of(1), 1);
  EXPECT_EQ(s.device_of(2), 1);
  EXPECT_EQ(s.device_of(3), 0);
  bool local = false;
  for (const auto& a : s.actions[1]) {
    local |= a.kind == ActionKind::kSendForward && a.stage == 1 && s.device_of(a.peer) == 1;
  }
  EXPECT_TRUE(local);
}

TEST(Validate, RejectsMissingAndMisorderedActions) {
  auto missing = make_schedule(ScheduleKind::kGPipe, 2, 2);
  missing.actions[1].pop_back();
  EXPECT_CONFIG_ERROR(validate_schedule(missing), "never runs B");
  auto early = make_schedule(ScheduleKind::kGPipe, 2, 2);
  std::swap(early.actions[0][0], early.actions[0][3]);
  EXPECT_CONFIG_ERROR(validate_schedule(early), "before F");
  auto wrong_device = make_schedule(ScheduleKind::kGPipe, 2, 2);
  wrong_device.actions[0][0].stage = 1;
  EXPECT_CONFIG_ERROR(validate_schedule(wrong_device), "placed on device 1");
}

TEST(Lowering, MarksEachStagesLastGradientActionFinal) {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
                    ScheduleKind::kZBH1, ScheduleKind::kZBV}) {
    const auto s =
        lower(make_schedule(kind, 2, 4, default_virtual_stages(kind)), Checkpoint::kExceptLast);
    const bool split = s.splits_backward();
    std::vector<int> marks(s.num_stages(), 0);
    for (const auto& list : s.actions) {
      // Scanning backwards, each stage's first B (or W, when split) met is its last one.
      std::vector<bool> seen(s.num_stages(), false);
      for (auto it = list.rbegin(); it != list.rend(); ++it) {
        const bool gradient = it->kind == (split ? ActionKind::kWeight : ActionKind::kBackward);
        EXPECT_EQ(it->final_gradient, gradient && !seen[it->stage])
            << to_string(kind) << " " << to_string(*it);
        if (gradient) seen[it->stage] = true;
        marks[it->stage] += it->final_gradient ? 1 : 0;
      }
    }
    EXPECT_EQ(marks, std::vector<int>(s.num_stages(), 1)) << to_string(kind);
  }
  const auto eval = lower(make_forward_schedule(ScheduleKind::kGPipe, 2, 2), Checkpoint::kNever);
  for (const auto& list : eval.actions) {
    for (const auto& a : list)
      EXPECT_FALSE(a.final_gradient) << to_string(a);
  }
}

TEST(Validate, RejectsAFinalGradientMarkThatIsNotTheLast) {
  auto moved = lower(make_schedule(ScheduleKind::k1F1B, 2, 3), Checkpoint::kNever);
  auto& list = moved.actions[1];
  auto first_b = std::find_if(list.begin(), list.end(),
                              [](const Action& a) { return a.kind == ActionKind::kBackward; });
  for (auto& a : list)
    a.final_gradient = false;
  first_b->final_gradient = true;
  EXPECT_CONFIG_ERROR(validate_schedule(moved), "stage 1 marks 1 B/W actions final_gradient");
  auto none = lower(make_schedule(ScheduleKind::kGPipe, 2, 2), Checkpoint::kNever);
  for (auto& a : none.actions[0])
    a.final_gradient = false;
  EXPECT_CONFIG_ERROR(validate_schedule(none), "stage 0 marks 0 B/W actions final_gradient");
  auto forward = lower(make_schedule(ScheduleKind::kGPipe, 2, 2), Checkpoint::kNever);
  forward.actions[0][0].final_gradient = true;
  EXPECT_CONFIG_ERROR(validate_schedule(forward), "is marked final_gradient but is not a B or W");
}

TEST(Schedule, SumPerDeviceFoldsStagesAsEachKindPlacesThem) {
  const std::vector<int64_t> stages = {1, 2, 3, 4};
  // Round robin: device 0 holds stages 0 and 2; the V: device 0 holds stages 0 and 3.
  EXPECT_EQ(sum_per_device(ScheduleKind::kInterleaved1F1B, 2, stages),
            (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(sum_per_device(ScheduleKind::kZBV, 2, stages), (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(sum_per_device(ScheduleKind::kGPipe, 4, stages), stages);
  EXPECT_EQ(sum_per_device(ScheduleKind::kZBV, 2, std::vector<double>{0.5, 1, 1, 0.25}),
            (std::vector<double>{0.75, 2}));
  EXPECT_CONFIG_ERROR(sum_per_device(ScheduleKind::kGPipe, 3, stages), "4 virtual stages");
}

TEST(Validate, FindsADeadlock) {
  // Device 1 waits for B1 from nowhere while device 0 waits for F1's gradient first.
  auto s = make_schedule(ScheduleKind::kGPipe, 2, 2);
  s.actions[0] = {s.actions[0][0], s.actions[0][3], s.actions[0][1], s.actions[0][2]};
  s.actions[0][1] = {ActionKind::kBackward, 0, 0, -1, false};
  s.actions[0][2] = {ActionKind::kForward, 0, 1, -1, false};
  s.actions[0][3] = {ActionKind::kBackward, 0, 1, -1, false};
  s.actions[1] = {{ActionKind::kForward, 1, 0, -1, false},
                  {ActionKind::kForward, 1, 1, -1, false},
                  {ActionKind::kBackward, 1, 1, -1, false},
                  {ActionKind::kBackward, 1, 0, -1, false}};
  EXPECT_CONFIG_ERROR(validate_schedule(s), "deadlocks");
}

}  // namespace
}  // namespace gpipe::testing
