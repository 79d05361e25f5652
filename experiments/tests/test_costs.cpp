// Tests of the cost library (experiments/costs): layer costs, the projected step, the memory
// replay, a measured step, calibrations. The target links gpipe_costs alone, so these also show
// that the library stands without the planner and the table drivers. What is asserted must hold on
// any machine, never a timing figure.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/optimizers.h"
#include "costs/calibration.h"
#include "costs/layer_costs.h"
#include "costs/measured_step.h"
#include "costs/memory.h"
#include "costs/projection.h"
#include "gpipe/errors.h"
#include "gpipe/models/registry.h"
#include "test_util.h"

namespace gpipe::costs {
namespace {

Pipeline::OptimizerFactory adam() {
  return cli::make_optimizer_factory(cli::OptimizerSettings("adam"));
}

models::ModelConfig tiny_transformer(int64_t layers) {
  models::ModelConfig c("transformer-l");
  c.transformer().layers(layers).d_model(32).ffn(64).heads(2).vocab(64).seq_len(8);
  return c;
}

// ---- projection -----------------------------------------------------------------------------

// n identical layers: forward f, backward b, update u ms; output of `bytes`.
LayerCosts uniform_costs(int64_t n, double f, double b, double u = 0, double bytes = 0) {
  LayerCosts costs;
  costs.microbatch = 1;
  costs.forward_ms.assign(n, f);
  costs.backward_ms.assign(n, b);
  costs.update_ms.assign(n, u);
  costs.output_bytes.assign(n, bytes);
  return costs;
}

// The GPipe step of K time-balanced devices and M micro-batches over `costs`.
StepProjection gpipe_step(const LayerCosts& costs, int64_t K, int64_t M, Checkpoint checkpoint,
                          const LinkModel& link) {
  return project(gpipe_shape(K, M, checkpoint), costs, link);
}

TEST(Projection, BalancedStagesFollowTheGPipeFormula) {
  // K balanced stages, M micro-batches, no recompute: (M + K - 1) (F + B), then the update.
  const auto costs = uniform_costs(8, 1.0, 2.0, 0.5);
  for (int64_t K : {1, 2, 4, 8}) {
    for (int64_t M : {1, 4, 32}) {
      const auto p = gpipe_step(costs, K, M, Checkpoint::kNever, link_preset("none"));
      const double stage = 8.0 / static_cast<double>(K);
      EXPECT_NEAR(p.pipeline_ms, static_cast<double>(M + K - 1) * stage * 3.0, 1e-9)
          << "K=" << K << " M=" << M;
      EXPECT_NEAR(p.update_ms, stage * 0.5, 1e-9);
      EXPECT_NEAR(p.step_ms, p.pipeline_ms + p.update_ms, 1e-9);
    }
  }
}

TEST(Projection, RecomputeAddsTheForwardOfEveryCheckpointedMicroBatch) {
  const auto costs = uniform_costs(4, 1.0, 2.0);
  const auto never = gpipe_step(costs, 1, 4, Checkpoint::kNever, link_preset("none"));
  const auto always = gpipe_step(costs, 1, 4, Checkpoint::kAlways, link_preset("none"));
  const auto except_last = gpipe_step(costs, 1, 4, Checkpoint::kExceptLast, link_preset("none"));
  EXPECT_NEAR(always.step_ms - never.step_ms, 4 * 4.0, 1e-9);
  EXPECT_NEAR(except_last.step_ms - never.step_ms, 3 * 4.0, 1e-9);
}

TEST(Projection, ScaledComputeScalesEveryTimeButNotTheLink) {
  auto costs = uniform_costs(4, 1.0, 2.0, 0.5, 1e6);
  costs.loss_forward_ms = 0.25;
  const auto scaled = scaled_compute(costs, 2.0);
  for (auto M : {1, 8}) {
    // Without a link the simulated step is linear in the costs.
    EXPECT_NEAR(gpipe_step(scaled, 2, M, Checkpoint::kAlways, link_preset("none")).step_ms,
                2 * gpipe_step(costs, 2, M, Checkpoint::kAlways, link_preset("none")).step_ms,
                1e-9);
  }
  // On a slow link the transfers keep their time, so the step grows by less than the factor.
  const auto slow = link_preset("pcie").scaled(1e-4);
  EXPECT_LT(gpipe_step(scaled, 2, 1, Checkpoint::kNever, slow).step_ms,
            2 * gpipe_step(costs, 2, 1, Checkpoint::kNever, slow).step_ms - 1.0);
  EXPECT_EQ(scaled.output_bytes, costs.output_bytes);
  EXPECT_CONFIG_ERROR(scaled_compute(costs, 0), "finite and > 0");
  EXPECT_CONFIG_ERROR(scaled_compute(costs, std::nan("")), "finite and > 0");
}

TEST(Projection, TheLossGoesToTheLastStageAndTheLinkCarriesStageOutputs) {
  auto costs = uniform_costs(4, 1.0, 2.0, 0.0, 1000);
  costs.output_bytes = {100, 200, 300, 400};
  costs.loss_forward_ms = 5;
  costs.loss_backward_ms = 7;
  const auto sim = stage_costs_ms(costs, {1, 3}, link_preset("pcie"));
  EXPECT_EQ(sim.forward, (std::vector<double>{1, 3 + 5}));
  EXPECT_EQ(sim.backward, (std::vector<double>{2, 6 + 7}));
  EXPECT_EQ(sim.recompute, sim.forward) << "no replay times: priced as the forward";
  EXPECT_TRUE(sim.checkpointed_forward.empty()) << "no no-grad times: priced as the forward";
  EXPECT_TRUE(sim.fused_backward.empty()) << "no whole backward: priced as the split one";
  costs.no_grad_forward_ms = {0.5, 0.5, 0.5, 0.5};
  costs.recompute_ms = {0.25, 0.25, 0.25, 0.25};
  const auto kinds = stage_costs_ms(costs, {1, 3}, link_preset("pcie"));
  EXPECT_EQ(kinds.checkpointed_forward, (std::vector<double>{0.5, 1.5 + 5}));
  EXPECT_EQ(kinds.recompute, (std::vector<double>{0.25, 0.75 + 5}));
  EXPECT_EQ(kinds.forward, sim.forward);
  costs.fused_backward_ms = {1.5, 1.5, 1.5, 1.5};
  EXPECT_EQ(stage_costs_ms(costs, {1, 3}, link_preset("pcie")).fused_backward,
            (std::vector<double>{1.5, 4.5 + 7}))
      << "the loss's backward on the last stage, as in the split backward";
  ASSERT_EQ(sim.link.boundary_bytes, (std::vector<double>{100}));     // the first stage's output
  EXPECT_NEAR(sim.link.latency, 10e-3, 1e-12);                        // 10 us in ms
  EXPECT_NEAR(sim.link.transfer_time(0), 10e-3 + 100 / 12e6, 1e-12);  // 12 GB/s in bytes per ms
}

TEST(Projection, SpeedupOverNaiveTwoGrowsWithMicroBatchesAndPartitions) {
  // Costs of a micro-batch of N/M: a mini-batch's work split M ways, as a profile at N/M with
  // perfect efficiency would measure it.
  const auto at = [](int64_t M) {
    const double m = static_cast<double>(M);
    return uniform_costs(16, 1.0 / m, 2.0 / m, 0.0, 4096.0 / m);
  };
  const auto step = [&](int64_t K, int64_t M) {
    return gpipe_step(at(M), K, M, Checkpoint::kAlways, link_preset("tpu")).step_ms;
  };
  const double base = step(2, 1);
  for (int64_t K : {2, 4, 8}) {
    double previous = 0;
    for (int64_t M : {1, 4, 32}) {
      const double speedup = base / step(K, M);
      EXPECT_GT(speedup, previous) << "K=" << K << " M=" << M;
      previous = speedup;
    }
  }
  // M = 1 has no pipelining: eight devices gain only by replaying their forwards (R) while the
  // gradient is still on its way, at most (F + B + R) / (F + B) = 4/3 here; the paper's M = 1 row
  // (1, 1.13, 1.38) is of that kind. At M = 32 eight devices come close to K M / (M + K - 1).
  EXPECT_GE(base / step(8, 1), 1.0);
  EXPECT_LE(base / step(8, 1), 4.0 / 3.0);
  EXPECT_GT(base / step(8, 32), 0.85 * 8.0 * 32 / 39);
  EXPECT_LE(base / step(8, 32), 8.0 * 32 / 39);
}

TEST(Projection, EveryScheduleIsItsSimulationPlusTheSlowestUpdateAndTheAllReduce) {
  // Eight uneven layers with updates and parameters, a slow link, two replicas, a calibration.
  LayerCosts costs = uniform_costs(8, 1.0, 2.0, 0.5, 1e5);
  for (int64_t i = 0; i < 8; ++i) {
    costs.forward_ms[i] += 0.25 * static_cast<double>(i);
    costs.weight_ms.push_back(0.75);
    costs.fused_backward_ms.push_back(1.8 + 0.25 * static_cast<double>(i));
    costs.update_ms[i] += 0.1 * static_cast<double>(i);
    costs.parameter_bytes.push_back(1000.0 * static_cast<double>(i + 1));
  }
  const auto link = link_preset("pcie").scaled(1e-3);
  for (auto kind : all_schedule_kinds()) {
    if (kind == ScheduleKind::kCustom || !schedule_shape_error(kind, 2, 4, 0).empty()) continue;
    PipelineShape shape = gpipe_shape(2, 4, Checkpoint::kExceptLast);
    shape.schedule = kind;
    shape.v = default_virtual_stages(kind);
    shape.R = 2;
    double reduced_bytes = 0;
    const auto p = project(
        shape, costs, link,
        ProjectionOptions().calibration(1.5).breakdown(true).allreduce_ms([&](double bytes) {
          reduced_bytes = bytes;
          return 3.0;
        }));
    const auto schedule = shape.training_schedule();
    const auto scaled = scaled_compute(costs, 1.5);
    EXPECT_EQ(p.stage_balance, balance_by_time(costs, 2 * shape.v)) << to_string(kind);
    EXPECT_DOUBLE_EQ(
        p.pipeline_ms,
        simulate(schedule, stage_costs_ms(scaled, p.stage_balance, link), Checkpoint::kExceptLast)
            .step_time)
        << to_string(kind);
    const auto updates =
        sum_per_device(schedule.stage_device, 2, sum_by_stage(scaled.update_ms, p.stage_balance));
    EXPECT_DOUBLE_EQ(p.update_ms, *std::max_element(updates.begin(), updates.end()));
    const auto bytes = sum_per_device(schedule.stage_device, 2,
                                      sum_by_stage(costs.parameter_bytes, p.stage_balance));
    EXPECT_DOUBLE_EQ(reduced_bytes, *std::max_element(bytes.begin(), bytes.end()))
        << "the largest device's parameters";
    EXPECT_DOUBLE_EQ(p.allreduce_ms, 3.0);
    EXPECT_DOUBLE_EQ(p.step_ms, p.pipeline_ms + p.allreduce_ms + p.update_ms);
    ASSERT_TRUE(p.shares.has_value());
    EXPECT_NEAR(p.shares->sum(), 1, 1e-9) << to_string(kind);
    EXPECT_GT(p.shares->communication, 2 * 3.0 / (2 * p.step_ms) - 1e-12) << "the all-reduce";
  }
}

TEST(Projection, RefusesWhatItCannotProject) {
  const auto costs = uniform_costs(4, 1.0, 2.0);
  auto shape = gpipe_shape(2, 2, Checkpoint::kNever);
  shape.precision = Precision::kBf16;
  EXPECT_CONFIG_ERROR(project(shape, costs, link_preset("none")),
                      "bf16 step cannot be projected from costs measured in fp32");
  shape = gpipe_shape(2, 2, Checkpoint::kNever, {1, 1, 2});
  EXPECT_CONFIG_ERROR(project(shape, costs, link_preset("none")),
                      "a balance of 3 stages was given");
  shape.schedule = ScheduleKind::kInterleaved1F1B;
  shape.v = 2;
  // A balance per device is split over each device's v stages as the engine splits it.
  shape.balance = Balance::per_device({1, 3});
  EXPECT_CONFIG_ERROR(project(shape, costs, link_preset("none")),
                      "which v=2 virtual stages cannot share evenly");
  shape.balance = Balance::per_device({2, 2});
  EXPECT_EQ(project(shape, costs, link_preset("none")).stage_balance,
            (std::vector<int64_t>{1, 1, 1, 1}));
  shape.balance = Balance::per_stage({1, 1, 2});
  EXPECT_CONFIG_ERROR(project(shape, costs, link_preset("none")), "which has 4 (K x v)");
  shape.R = 2;
  EXPECT_CONFIG_ERROR(project(shape, costs, link_preset("none")),
                      "needs the time of its all-reduce");
}

TEST(Projection, KLargerThanTheLayersIsAConfigError) {
  const auto costs = uniform_costs(5, 1.0, 2.0);
  EXPECT_CONFIG_ERROR(balance_by_time(costs, 8), "K=8 partitions need at least 8 layers");
  EXPECT_CONFIG_ERROR(balance_by_time(costs, 0), "must be >= 1");
  EXPECT_EQ(balance_by_time(costs, 5), (std::vector<int64_t>{1, 1, 1, 1, 1}));
}

TEST(Projection, SamplesPerSecond) {
  EXPECT_DOUBLE_EQ(samples_per_second(64, 500), 128);
  EXPECT_CONFIG_ERROR(samples_per_second(64, 0), "must be > 0 ms");
}

// ---- memory ----------------------------------------------------------------------------------

// Four layers: 100 bytes kept each, 10 bytes of parameters, 5 bytes of output, a backward that
// needs 10 bytes more while it runs, and weight gradients they defer.
LayerCosts four_layers() {
  LayerCosts c;
  c.microbatch = 1;
  c.forward_ms.assign(4, 1);
  c.backward_ms.assign(4, 2);
  c.weight_ms.assign(4, 1);
  c.update_ms.assign(4, 0);
  c.activation_bytes.assign(4, 100);
  c.parameter_bytes.assign(4, 10);
  c.output_bytes.assign(4, 5);
  c.backward_bytes.assign(4, 10);
  return c;
}

TEST(Memory, ReplayFollowsEachSchedulesInFlightMicroBatches) {
  const auto costs = four_layers();
  const std::vector<int64_t> halves = {2, 2};
  // State: 20 bytes of parameters x (2 + 1 slot) = 60. The last stage keeps 5 bytes more per
  // micro-batch for the loss, and a B needs its 10 bytes of workspace.
  // GPipe without recompute: all 4 micro-batches are held when the first B runs.
  auto gpipe = predict_peak_bytes(costs, make_schedule(ScheduleKind::kGPipe, 2, 4), halves,
                                  Checkpoint::kNever, 1);
  EXPECT_DOUBLE_EQ(gpipe[0], 60 + 4 * 200 + 10);
  EXPECT_DOUBLE_EQ(gpipe[1], 60 + 4 * 205 + 10);
  // 1F1B: device 0 holds K = 2 micro-batches, the last device one.
  auto one_f = predict_peak_bytes(costs, make_schedule(ScheduleKind::k1F1B, 2, 4), halves,
                                  Checkpoint::kNever, 1);
  EXPECT_DOUBLE_EQ(one_f[0], 60 + 2 * 200 + 10);
  EXPECT_DOUBLE_EQ(one_f[1], 60 + 1 * 205 + 10);
  // ZB-H1 is 1F1B's order with W deferred: the activations stay until W, so the last device
  // holds a second micro-batch (W0 runs after B1). Layers that do not defer free theirs at B.
  auto zb = predict_peak_bytes(costs, make_schedule(ScheduleKind::kZBH1, 2, 4), halves,
                               Checkpoint::kNever, 1);
  auto no_w = costs;
  no_w.weight_ms.assign(4, 0);
  auto zb_no_w = predict_peak_bytes(no_w, make_schedule(ScheduleKind::kZBH1, 2, 4), halves,
                                    Checkpoint::kNever, 1);
  EXPECT_DOUBLE_EQ(zb[0], one_f[0]);
  // m0 keeps its 200 bytes of weight-deferring activations after B0 (the loss's 5 are freed).
  EXPECT_DOUBLE_EQ(zb[1], 60 + 200 + 205 + 10);
  EXPECT_DOUBLE_EQ(zb_no_w[1], one_f[1]);
  // Recompute: a forward keeps its input (5 bytes on device 1; the model's input is charged to
  // the host on device 0); the replay holds one micro-batch's activations.
  auto always = predict_peak_bytes(costs, make_schedule(ScheduleKind::kGPipe, 2, 4), halves,
                                   Checkpoint::kAlways, 1);
  EXPECT_DOUBLE_EQ(always[0], 60 + 200 + 10);
  EXPECT_DOUBLE_EQ(always[1], 60 + 4 * 5 + 205 + 10);
}

TEST(Memory, AnEmptyWeightShareMeansNoLayerDefersW) {
  auto costs = four_layers();
  auto no_w = costs;
  no_w.weight_ms.clear();
  auto zero_w = costs;
  zero_w.weight_ms.assign(4, 0);
  const auto zb = make_schedule(ScheduleKind::kZBH1, 2, 4);
  EXPECT_EQ(predict_peak_bytes(no_w, zb, {2, 2}, Checkpoint::kNever, 1),
            predict_peak_bytes(zero_w, zb, {2, 2}, Checkpoint::kNever, 1));
}

TEST(Memory, KeptMicroBatchesFollowTheScheduleUnlessRematerialised) {
  EXPECT_EQ(kept_microbatches(make_schedule(ScheduleKind::kGPipe, 2, 8), Checkpoint::kNever), 8);
  EXPECT_EQ(kept_microbatches(make_schedule(ScheduleKind::k1F1B, 2, 8), Checkpoint::kNever), 2);
  EXPECT_EQ(kept_microbatches(make_schedule(ScheduleKind::kGPipe, 2, 8), Checkpoint::kAlways), 1);
}

TEST(Memory, BalanceByMemoryWeighsStateAndKeptActivations) {
  auto costs = four_layers();
  costs.parameter_bytes = {100, 200, 300, 400};
  costs.activation_bytes = {10, 20, 30, 40};
  // State x 3 (one slot) plus one micro-batch of activations.
  EXPECT_EQ(layer_memory_bytes(costs, 1, 1), (std::vector<double>{310, 620, 930, 1240}));
  EXPECT_EQ(balance_by_memory(costs, 2, 1, 1), (std::vector<int64_t>{3, 1}));
  // Two slots make state x 4; eight kept micro-batches weigh the activations x 8.
  EXPECT_EQ(layer_memory_bytes(costs, 2, 8), (std::vector<double>{480, 960, 1440, 1920}));
  EXPECT_CONFIG_ERROR(balance_by_memory(costs, 5, 1, 1), "K=5 stages need at least 5 layers");
  EXPECT_CONFIG_ERROR(balance_by_memory(costs, 2, -1, 1), "state slots must be >= 0");
}

TEST(Memory, ScaledBytesScalesWhatAMicroBatchHoldsButNotTheParameters) {
  const auto costs = four_layers();
  const auto twice = scaled_bytes(costs, 2);
  EXPECT_EQ(twice.activation_bytes, (std::vector<double>{200, 200, 200, 200}));
  EXPECT_EQ(twice.output_bytes, (std::vector<double>{10, 10, 10, 10}));
  EXPECT_EQ(twice.backward_bytes, (std::vector<double>{20, 20, 20, 20}));
  EXPECT_EQ(twice.parameter_bytes, costs.parameter_bytes);
  EXPECT_EQ(twice.forward_ms, costs.forward_ms);
  // A GPipe step without re-materialisation holds every micro-batch: twice the bytes per
  // micro-batch doubles all but the state.
  const auto gpipe = make_schedule(ScheduleKind::kGPipe, 1, 4);
  const auto one = predict_peak_bytes(costs, gpipe, {4}, Checkpoint::kNever, 1);
  const auto two = predict_peak_bytes(twice, gpipe, {4}, Checkpoint::kNever, 1);
  EXPECT_DOUBLE_EQ(two[0] - 120, 2 * (one[0] - 120));
  EXPECT_CONFIG_ERROR(scaled_bytes(costs, 0), "finite and > 0");
}

// ---- measured steps and layer costs ---------------------------------------------------------

TEST(MeasuredStep, MeasuredStepsReportTimeAndPerDeviceMemory) {
  const auto builder = models::make_model(tiny_transformer(2));
  PipelineShape shape;
  shape.balance = Balance::per_device({2, 2});
  shape.M = 2;
  shape.checkpoint = Checkpoint::kAlways;
  const auto m = measure_training(*builder, builder->sample_batch(4, 1), shape, adam(), 1, 2);
  ASSERT_EQ(m.step_ms.size(), 2u);
  EXPECT_GT(m.median_step_ms, 0);
  ASSERT_EQ(m.peak_bytes.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    // Adam: parameters, gradients and two state tensors, at least 16 bytes per parameter.
    EXPECT_GE(m.state_bytes[s], 16 * 4) << s;
    EXPECT_GE(m.peak_bytes[s], m.state_bytes[s] + m.peak_activation_bytes[s]) << s;
  }
  EXPECT_CONFIG_ERROR(measure_training(*builder, builder->sample_batch(4, 1), shape, adam(), 0, 1),
                      "at least two steps");
}

TEST(MeasuredStep, TheCpuMeterSeesThisProcessWorking) {
  const CpuMeter meter;
  volatile double sink = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < until)
    sink = sink + 1.0;
  const auto reading = meter.read();
  EXPECT_GE(reading.wall_s, 0.1);
  EXPECT_GT(reading.own_cores, 0.1);  // a spinning thread, even on a crowded machine
  EXPECT_GE(reading.other_cores, 0.0);
}

TEST(LayerCosts, LayerCostsOfARealModelFeedAProjection) {
  const auto builder = models::make_model(tiny_transformer(2));
  const auto costs = measure_layer_costs(builder->build(), builder->sample_batch(2, 3),
                                         builder->loss(), DeviceSpec::parse("cpu:0"), adam(),
                                         ProfileOptions().warmup(0).iterations(1).threads(1));
  ASSERT_EQ(costs.num_layers(), builder->num_layers());
  EXPECT_EQ(costs.microbatch, 2);
  for (int64_t i = 0; i < costs.num_layers(); ++i) {
    EXPECT_GT(costs.output_bytes[i], 0);
    EXPECT_GE(costs.forward_ms[i], 0);
    EXPECT_GE(costs.update_ms[i], 0);
  }
  // The head's output is the logits: 2 x 8 x 64 floats.
  EXPECT_EQ(costs.output_bytes.back(), 2 * 8 * 64 * 4);
  const auto p = gpipe_step(costs, 2, 2, Checkpoint::kAlways, link_preset("pcie"));
  EXPECT_GT(p.step_ms, 0);
  EXPECT_EQ(p.stage_balance.size(), 2u);
}

// ---- calibration ------------------------------------------------------------------------------

TEST(Calibration, KeysAreTypedAndReadBackFromJson) {
  CalibrationKey key;
  key.microbatch = 8;
  key.threads = 2;
  key.K = 4;
  key.M = 8;
  key.replicas = 2;
  key.checkpoint = Checkpoint::kExceptLast;
  key.family = ScheduleFamily::kV;
  EXPECT_EQ(nlohmann::json(key).get<CalibrationKey>(), key);
  EXPECT_EQ(key.describe(), "micro-batch 8, 2 threads, K=4 M=8 R=2, except_last, v");
  const auto screening = key.screening();
  EXPECT_EQ(screening.checkpoint, Checkpoint::kNever);
  EXPECT_EQ(screening.family, ScheduleFamily::kFused);
  EXPECT_TRUE(screening < key || key < screening);
  EXPECT_FALSE(screening == key);
  for (const char* field : {"microbatch", "threads", "K", "M", "replicas"}) {
    auto bad = nlohmann::json(key);
    bad[field] = 0;
    EXPECT_CONFIG_ERROR(bad.get<CalibrationKey>(), std::string("integer ") + field + " >= 1");
  }
  auto bad = nlohmann::json(key);
  bad["family"] = "w";
  EXPECT_CONFIG_ERROR(bad.get<CalibrationKey>(), "unknown schedule family 'w'");
  bad["family"] = "v";
  bad["checkpoint"] = "sometimes";
  EXPECT_CONFIG_ERROR(bad.get<CalibrationKey>(), "sometimes");
}

TEST(Calibration, EveryScheduleHasTheFamilyOfItsBackwardAndPlacement) {
  const std::map<ScheduleKind, ScheduleFamily> expected{
      {ScheduleKind::kGPipe, ScheduleFamily::kFused},
      {ScheduleKind::k1F1B, ScheduleFamily::kFused},
      {ScheduleKind::kInterleaved1F1B, ScheduleFamily::kFused},
      {ScheduleKind::kLoopedBFS, ScheduleFamily::kFused},
      {ScheduleKind::kZBH1, ScheduleFamily::kSplit},
      {ScheduleKind::kZBH2, ScheduleFamily::kSplit},
      {ScheduleKind::kZBV, ScheduleFamily::kV},
      {ScheduleKind::kDualPipeV, ScheduleFamily::kV},
      {ScheduleKind::kVHalf, ScheduleFamily::kV}};
  for (auto kind : all_schedule_kinds()) {
    ASSERT_TRUE(expected.count(kind)) << to_string(kind);
    const auto schedule = make_schedule(kind, 2, 4, default_virtual_stages(kind));
    EXPECT_EQ(schedule_family(schedule), expected.at(kind)) << to_string(kind);
    // Each family's representative is of that family.
    const auto family = expected.at(kind);
    const auto rep = representative(family);
    EXPECT_EQ(schedule_family(make_schedule(rep, 2, 4, default_virtual_stages(rep))), family);
  }
  EXPECT_EQ(schedule_family(make_schedule(ScheduleKind::kZBH1, 1, 4)), ScheduleFamily::kFused)
      << "one device";
  // A key's shape is its representative's, with the key's K, M and re-materialisation.
  CalibrationKey key;
  key.K = 2;
  key.M = 4;
  key.family = ScheduleFamily::kV;
  key.checkpoint = Checkpoint::kAlways;
  const auto shape = key.shape();
  EXPECT_EQ(shape.schedule, ScheduleKind::kZBV);
  EXPECT_EQ(shape.virtual_stages(), 2);
  EXPECT_EQ(shape.checkpoint, Checkpoint::kAlways);
  EXPECT_EQ(shape.describe(), "K=2,R=1,M=4,schedule=zbv,v=2,checkpoint=always,threads=1");
}

TEST(Calibration, ContentionCountsWhereEveryDeviceIsBusy) {
  // K = 2 with half the device time idle (M = 1): never both busy, the one-device ratio.
  EXPECT_DOUBLE_EQ(costs::contended_calibration(0.9, 1.2, 0.5, 2), 0.9);
  // No bubble: both always busy, the ratio of two at once.
  EXPECT_DOUBLE_EQ(costs::contended_calibration(0.9, 1.2, 0.0, 2), 1.2);
  // A bubble of 0.1 at K = 2: both busy 80% of the step.
  EXPECT_NEAR(costs::contended_calibration(0.9, 1.2, 0.1, 2), 0.9 + 0.3 * 0.8, 1e-12);
  // K = 4, bubble 0.25: all four busy at least (4 x 0.75 - 1) / 3 = 2/3 of the step.
  EXPECT_NEAR(costs::contended_calibration(1.0, 1.3, 0.25, 4), 1.0 + 0.3 * 2.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(costs::contended_calibration(0.9, 1.2, 0.0, 1), 0.9);
  EXPECT_THROW(costs::contended_calibration(0.9, 1.2, 1.5, 2), ConfigError);
  EXPECT_THROW(costs::contended_calibration(0.0, 1.2, 0.1, 2), ConfigError);
}

TEST(Calibration, RoundsInterleaveTheirKeysAndGiveTheMedian) {
  Calibrations<CalibrationKey> book;
  CalibrationKey a, b;
  b.M = 2;
  std::vector<CalibrationKey> order;
  std::map<CalibrationKey, std::vector<double>> values = {{a, {1.0, 3.0, 2.0, 9.0, 9.0}},
                                                          {b, {1.1, 1.1, 1.1}}};
  const auto measure = [&](const CalibrationKey& key) {
    order.push_back(key);
    return values[key][book.rounds(key).size()];
  };
  EXPECT_EQ(book.measure_in_rounds({a, b}, 3, 0, 0.1, measure), 6);
  EXPECT_EQ(order, (std::vector<CalibrationKey>{a, b, a, b, a, b}));
  EXPECT_DOUBLE_EQ(book.median(a), 2.0);
  EXPECT_DOUBLE_EQ(book.spread(a), 2.0);  // 3 / 1 - 1
  EXPECT_DOUBLE_EQ(book.spread(b), 0.0);
  // Rounds already held count; extra rounds measure only what is still unsettled.
  EXPECT_EQ(book.measure_in_rounds({a, b}, 3, 2, 0.1, measure), 2);
  EXPECT_EQ(book.rounds(a).size(), 5u);
  EXPECT_EQ(book.rounds(b).size(), 3u);
  EXPECT_DOUBLE_EQ(book.median(a), 3.0);
  // JSON keeps every round under its typed key; the text-named form of older caches is refused.
  const auto json = to_json(book);
  ASSERT_TRUE(json.is_array());
  EXPECT_EQ(json[0]["key"], nlohmann::json(a));
  const auto copy = calibrations_from_json(json);
  EXPECT_EQ(copy.rounds(a), book.rounds(a));
  EXPECT_EQ(copy.rounds(b), book.rounds(b));
  EXPECT_CONFIG_ERROR(calibrations_from_json(nlohmann::json{{"2x1x1x2x1", {1.5}}}),
                      "an older cache names them by text");
  EXPECT_CONFIG_ERROR(calibrations_from_json(nlohmann::json::array({{{"key", a}}})),
                      "a calibration is {key, rounds}");
  CalibrationKey c;
  c.M = 3;
  EXPECT_CONFIG_ERROR(book.median(c), "micro-batch 1, 1 thread, K=1 M=3 R=1, never, fused has not");
  EXPECT_CONFIG_ERROR(book.add(a, 0), "finite and > 0");
  EXPECT_CONFIG_ERROR(book.measure_in_rounds({a}, 0, 0, 0.1, measure), "got 0 and 0");
}

TEST(Calibration, AFamilysCalibrationMeasuresItsRepresentativeSchedule) {
  const auto builder = models::make_model(tiny_transformer(2));
  const auto costs = measure_layer_costs(builder->build(), builder->sample_batch(2, 3),
                                         builder->loss(), DeviceSpec::parse("cpu:0"), adam(),
                                         ProfileOptions().warmup(0).iterations(1).threads(1));
  for (auto family : {ScheduleFamily::kSplit, ScheduleFamily::kV}) {
    CalibrationKey key;
    key.microbatch = 2;
    key.K = 2;
    key.M = 4;
    key.family = family;
    const auto step =
        measure_calibration(*builder, costs, key, adam(), CalibrationOptions().warmup(1).steps(1));
    EXPECT_GT(step.measured_ms, 0);
    EXPECT_DOUBLE_EQ(step.projected_ms, project(key.shape(), costs, link_preset("none")).step_ms)
        << to_string(family);
    EXPECT_NE(step.projected_ms,
              project(CalibrationKey(key.screening()).shape(), costs, link_preset("none")).step_ms)
        << "a " << to_string(family) << " step is not the fused one";
  }
}

TEST(Calibration, AOneDeviceCalibrationMakesItsProjectionTheMeasuredStep) {
  const auto builder = models::make_model(tiny_transformer(2));
  const auto costs = measure_layer_costs(builder->build(), builder->sample_batch(2, 3),
                                         builder->loss(), DeviceSpec::parse("cpu:0"), adam(),
                                         ProfileOptions().warmup(0).iterations(1).threads(1));
  CalibrationKey key;
  key.microbatch = 2;
  key.M = 2;
  key.checkpoint = Checkpoint::kAlways;
  const auto step =
      measure_calibration(*builder, costs, key, adam(), CalibrationOptions().warmup(1).steps(1));
  ASSERT_GT(step.measured_ms, 0);
  EXPECT_NEAR(step.projected_ms,
              gpipe_step(costs, 1, 2, Checkpoint::kAlways, link_preset("none")).step_ms, 1e-9);
  const auto calibrated = scaled_compute(costs, step.ratio());
  EXPECT_NEAR(gpipe_step(calibrated, 1, 2, Checkpoint::kAlways, link_preset("none")).step_ms,
              step.measured_ms, 1e-6 * step.measured_ms);
  EXPECT_EQ(calibrated.output_bytes, costs.output_bytes);  // what the links carry stays
  key.replicas = 2;
  EXPECT_CONFIG_ERROR(
      measure_calibration(*builder, costs, key, adam(), CalibrationOptions().devices({"cpu:0"})),
      "needs 2 devices, got 1");
}

}  // namespace
}  // namespace gpipe::costs
