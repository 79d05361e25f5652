// The step breakdown (tables/breakdown.h): simulated splits that follow the schedule's algebra,
// measured splits from a real step's timeline, and the report.
#include <gtest/gtest.h>

#include "costs/measured_step.h"
#include "tables/breakdown.h"
#include "tables/workload.h"
#include "test_util.h"

namespace gpipe::tables {
namespace {

// Two equal stages: forward 1 ms, backward 2 ms per micro-batch, no update, 1 MB outputs.
costs::LayerCosts two_stages(double second_stage_factor = 1) {
  costs::LayerCosts costs;
  costs.forward_ms = {1, second_stage_factor};
  costs.backward_ms = {2, 2 * second_stage_factor};
  costs.update_ms = {0, 0};
  costs.output_bytes = {1e6, 1e6};
  return costs;
}

// The simulated breakdown of the GPipe step of K devices cut by `balance`.
StepBreakdown simulated_breakdown(const costs::LayerCosts& costs, int64_t K, int64_t M,
                                  Checkpoint checkpoint, const LinkModel& link,
                                  std::vector<int64_t> balance) {
  const auto shape = costs::gpipe_shape(K, M, checkpoint, std::move(balance));
  return breakdown_of(
      shape, costs::project(shape, costs, link, costs::ProjectionOptions().breakdown(true)));
}

TEST(StepBreakdown, ABalancedPipelineIdlesOnlyInItsBubble) {
  // K=2, M=4 without recompute: the step is (M + K - 1) x 3 ms = 15 ms, each device works 12.
  const auto b =
      simulated_breakdown(two_stages(), 2, 4, Checkpoint::kNever, link_preset("none"), {1, 1});
  EXPECT_NEAR(b.step_ms, 15, 1e-9);
  EXPECT_NEAR(b.forward, 8.0 / 30, 1e-9);
  EXPECT_NEAR(b.backward, 16.0 / 30, 1e-9);
  EXPECT_NEAR(b.bubble, 6.0 / 30, 1e-9);  // (K-1)/(M+K-1) of each device
  EXPECT_NEAR(b.imbalance, 0, 1e-9);
  EXPECT_NEAR(b.communication, 0, 1e-9);
  EXPECT_NEAR(b.recompute, 0, 1e-9);
  EXPECT_NEAR(b.sum(), 1, 1e-9);
  EXPECT_EQ(b.largest_overhead(), "bubble");
}

TEST(StepBreakdown, UnevenStagesLinksAndRecomputeEachShowInTheirOwnColumn) {
  // Recompute replays every forward once.
  const auto r =
      simulated_breakdown(two_stages(), 2, 8, Checkpoint::kAlways, link_preset("none"), {1, 1});
  EXPECT_NEAR(r.recompute, r.forward, 1e-9);
  EXPECT_NEAR(r.sum(), 1, 1e-9);
  // A stage three times the other: the bubble of the balanced pipeline plus imbalance.
  const auto u =
      simulated_breakdown(two_stages(3), 2, 8, Checkpoint::kNever, link_preset("none"), {1, 1});
  EXPECT_GT(u.imbalance, 0.2);
  EXPECT_NEAR(u.sum(), 1, 1e-9);
  // A 100 MB/s link: 10 ms a transfer against 3 ms of compute.
  LinkModel slow;
  slow.bandwidth = 100e6;
  const auto l = simulated_breakdown(two_stages(), 2, 4, Checkpoint::kNever, slow, {1, 1});
  EXPECT_GT(l.communication, 0.3);
  EXPECT_EQ(l.largest_overhead(), "communication");
  EXPECT_NEAR(l.sum(), 1, 1e-9);
}

TEST(StepBreakdown, UnevenFusedBackwardsAreImbalanceNotBubble) {
  // A schedule that does not split its backward runs the fused one: 2 ms on stage 0, 6 ms on
  // stage 1. The balanced twin puts every stage at the mean (F 1, fused B 4): its idle time,
  // K x (M + K - 1) x 5 - K x M x 5 = 10 ms, is the bubble; the rest is the uneven stages'.
  auto costs = two_stages();
  costs.fused_backward_ms = {2, 6};
  const auto b = simulated_breakdown(costs, 2, 4, Checkpoint::kNever, link_preset("none"), {1, 1});
  EXPECT_NEAR(b.bubble * 2 * b.step_ms, 10, 1e-9);
  EXPECT_GT(b.imbalance, 0.1);
  EXPECT_NEAR(b.sum(), 1, 1e-9);
}

TEST(StepBreakdown, AMeasuredStepSplitsItsIdleTimeAsTheSimulationDoes) {
  auto simulated =
      simulated_breakdown(two_stages(), 2, 1, Checkpoint::kNever, link_preset("none"), {1, 1});
  // Device 0: F [0, 1] ms, B [5, 7]; device 1: F [1, 2], B [2, 4]; the step took 8 ms.
  std::vector<TimelineEvent> events{{0, "F0", 0, 0, 0, 1000},
                                    {0, "RECV_B0", 0, 0, 1000, 4000},
                                    {0, "B0", 0, 0, 5000, 2000},
                                    {1, "F0", 0, 0, 1000, 1000},
                                    {1, "B0", 0, 0, 2000, 2000}};
  events[1].communication = true;
  const auto m = measured_breakdown(events, 8.0, simulated);
  EXPECT_EQ(m.source, "measured");
  EXPECT_NEAR(m.forward, 2.0 / 16, 1e-9);
  EXPECT_NEAR(m.backward, 4.0 / 16, 1e-9);
  EXPECT_NEAR(m.optimizer, 2 * (8.0 - 7.0) / 16, 1e-9);  // after the schedule's 7 ms
  EXPECT_NEAR(m.bubble, (14.0 - 6.0) / 16, 1e-9);        // all idle: the simulation has no other
  EXPECT_NEAR(m.sum(), 1, 1e-9);
  events.erase(events.begin() + 3, events.end());
  EXPECT_CONFIG_ERROR(measured_breakdown(events, 8.0, simulated), "does not cover all 2 devices");
}

TEST(StepBreakdown, ARealStepsTimelineGivesFractionsThatSumToOne) {
  models::ModelConfig config("mlp");
  config.mlp().depth(4);
  const auto builder = models::make_model(config);
  PipelineShape shape;
  shape.balance = Balance::per_device({3, 2});  // the mlp's 4 hidden layers and its head
  shape.M = 4;
  shape.checkpoint = Checkpoint::kAlways;
  const auto m = costs::measure_training(*builder, builder->sample_batch(16, 1), shape,
                                         make_optimizer("adam"), 1, 1);
  ASSERT_FALSE(m.last_step_events.empty());
  costs::LayerCosts costs;
  costs.forward_ms.assign(5, 1);
  costs.backward_ms.assign(5, 2);
  costs.update_ms.assign(5, 0);
  costs.output_bytes.assign(5, 0);
  const auto simulated = simulated_breakdown(costs, 2, 4, Checkpoint::kAlways, link_preset("none"),
                                             shape.device_balance());
  const auto b = measured_breakdown(m.last_step_events, m.step_ms.back(), simulated);
  EXPECT_NEAR(b.sum(), 1, 1e-9);
  EXPECT_GT(b.forward, 0);
  EXPECT_GT(b.recompute, 0);
  EXPECT_GT(b.backward, 0);

  BreakdownReport report;
  report.rows = {simulated, b};
  report.command = "scaling_table --preset quick";
  const auto markdown = to_markdown(report);
  EXPECT_NE(markdown.find("| measured |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("Largest overhead"), std::string::npos);
  const auto json = to_json(report);
  for (const char* key : {"model", "K", "M", "source", "forward", "backward", "recompute", "bubble",
                          "imbalance", "communication", "optimizer"}) {
    EXPECT_TRUE(json["rows"][1].contains(key)) << key;
  }
}

}  // namespace
}  // namespace gpipe::tables
