// The planner (experiments/plan): candidate shapes, the memory replay, the refusal of plans over
// the budget, the cost cache, calibration and all-reduce timing, and the flags a plan turns into.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "gpipe/errors.h"
#include "gpipe/timing.h"
#include "plan/planner.h"
#include "test_util.h"
#include "train/optimization.h"
#include "train/train_plan.h"

namespace gpipe::plan {
namespace {

PlanRequest cpu_request(int64_t cores, int64_t batch) {
  PlanRequest request;
  request.cores = cores;
  request.batch = batch;
  request.calibration_rounds = 1;  // one calibration each: the rounds have a test of their own
  return request;
}

// The entry of the only model in a cost cache's JSON (beside its "format").
nlohmann::json& model_entry(nlohmann::json& cache) {
  for (auto& [key, value] : cache.items()) {
    if (value.is_object()) return value;
  }
  throw std::runtime_error("no model in the cache: " + cache.dump());
}

// One section ("calibration", "allreduce", ...) of the only model in a cost cache file.
nlohmann::json cache_section(const std::filesystem::path& path, const std::string& section) {
  std::ifstream in(path);
  auto cache = nlohmann::json::parse(in);
  return model_entry(cache).at(section);
}

TEST(Plan, CandidateShapesCoverTheSpaceAndOnlyIt) {
  const auto shapes = candidate_shapes(cpu_request(2, 8), 6);
  bool k1_all_threads = false, interleaved = false, replicas = false;
  for (const auto& s : shapes) {
    EXPECT_LE(s.K * s.R * s.threads, 2) << s.describe();
    EXPECT_EQ((8 / s.R) % s.M, 0) << s.describe();
    if (s.K == 1) {
      EXPECT_EQ(s.schedule, ScheduleKind::kGPipe) << s.describe();
    }
    if (s.M == 1) {
      EXPECT_NE(s.checkpoint, Checkpoint::kExceptLast) << s.describe();
    }
    if (s.schedule == ScheduleKind::kInterleaved1F1B) {
      EXPECT_EQ(s.M % s.K, 0) << s.describe();
      EXPECT_EQ(s.v, 2);
      interleaved = true;
    }
    k1_all_threads |= s.K == 1 && s.R == 1 && s.threads == 2;
    replicas |= s.R == 2;
  }
  EXPECT_TRUE(k1_all_threads);
  EXPECT_TRUE(interleaved);
  EXPECT_TRUE(replicas);
  // Accelerators: K x R uses every device, one thread each.
  PlanRequest gpus = cpu_request(1, 8);
  gpus.devices = {"cuda:0", "cuda:1", "cuda:2", "cuda:3"};
  for (const auto& s : candidate_shapes(gpus, 6)) {
    EXPECT_EQ(s.K * s.R, 4) << s.describe();
    EXPECT_EQ(s.threads, 1);
  }
}

// A small MLP measured for real: the search ranks only plans under the budget.
class PlanSearch : public ::testing::Test {
 protected:
  static models::ModelConfig mlp() {
    models::ModelConfig config("mlp");
    config.mlp().depth(4).width(64);
    return config;
  }
  static Pipeline::OptimizerFactory sgd() {
    train::TrainOptions options;
    return train::make_optimizer_factory(options);
  }
};

TEST_F(PlanSearch, PlansOverTheBudgetAreNeverRanked) {
  CostBook book(mlp(), sgd());
  EXPECT_EQ(book.state_slots(), 1);  // SGD with momentum keeps one buffer per parameter
  auto request = cpu_request(2, 8);
  request.max_chunks = 4;
  const auto all = search(book, request);
  ASSERT_EQ(all.ranked.size(), static_cast<size_t>(all.considered));
  std::vector<double> peaks;
  for (const auto& p : all.ranked)
    peaks.push_back(p.max_peak_bytes());
  std::sort(peaks.begin(), peaks.end());
  request.memory_per_device = peaks[peaks.size() / 2];
  const auto some = search(book, request);
  EXPECT_LT(some.ranked.size(), all.ranked.size());
  EXPECT_FALSE(some.ranked.empty());
  for (const auto& p : some.ranked)
    EXPECT_LE(p.max_peak_bytes(), request.memory_per_device) << p.shape.describe();
  for (size_t i = 1; i < some.ranked.size(); ++i)
    EXPECT_LE(some.ranked[i - 1].step_ms, some.ranked[i].step_ms * (1 + 1e-9));
  // Below the smallest plan nothing is ranked, and the smallest is named.
  request.memory_per_device = peaks.front() * 0.5;
  const auto none = search(book, request);
  EXPECT_TRUE(none.ranked.empty());
  ASSERT_TRUE(none.smallest.has_value());
  // The smallest needs more than the budget and no more than any plan ranked above. Not
  // necessarily as little as the smallest of those: a generous search keeps each shape's fastest
  // balance, while a search where nothing fits keeps each shape's smallest, and which balance is
  // fastest depends on the measured times (a clean-clone ASan run named one 3.5 KB below).
  EXPECT_GT(none.smallest->max_peak_bytes(), request.memory_per_device);
  EXPECT_LE(none.smallest->max_peak_bytes(), peaks.front());
  EXPECT_NE(train::nothing_fits(none, request).find("the smallest needs"), std::string::npos);
}

TEST_F(PlanSearch, TheCostCacheMeasuresEachShapeOnce) {
  const auto path = std::filesystem::temp_directory_path() / "gpipe_plan_cache_test.json";
  std::filesystem::remove(path);
  CostBook first(mlp(), sgd(), path.string());
  const auto& a = first.at(2, 1);
  EXPECT_EQ(first.measured(), 1);
  CostBook second(mlp(), sgd(), path.string());
  const auto& b = second.at(2, 1);
  EXPECT_EQ(second.measured(), 0);
  EXPECT_EQ(a.layers.forward_ms, b.layers.forward_ms);
  EXPECT_EQ(a.layers.no_grad_forward_ms.size(), a.layers.forward_ms.size());
  EXPECT_EQ(a.layers.no_grad_forward_ms, b.layers.no_grad_forward_ms);
  EXPECT_EQ(a.layers.recompute_ms, b.layers.recompute_ms);
  EXPECT_EQ(a.layers.fused_backward_ms.size(), a.layers.forward_ms.size());
  EXPECT_EQ(a.layers.fused_backward_ms, b.layers.fused_backward_ms);
  EXPECT_EQ(a.layers.activation_bytes, b.layers.activation_bytes);
  auto other = mlp();
  other.mlp().width(32);  // another model: measured again
  CostBook third(other, sgd(), path.string());
  third.at(2, 1);
  EXPECT_EQ(third.measured(), 1);
  std::filesystem::remove(path);
}

// A cache proves what it holds: an entry moved under another model's key (the stale cache of the
// hostile-input report: width-64 costs keyed for width 2048) or edited is measured again, and a
// file that is not a cache is refused and left as it was.
TEST_F(PlanSearch, TheCostCacheIgnoresForeignEntriesAndNeverOverwritesOtherFiles) {
  const auto path = std::filesystem::temp_directory_path() / "gpipe_plan_foreign_test.json";
  std::filesystem::remove(path);
  CostBook small(mlp(), sgd(), path.string());
  small.at(2, 1);
  nlohmann::json cache;
  std::ifstream(path) >> cache;
  auto wide = mlp();
  wide.mlp().width(48);
  {
    CostBook probe(wide, sgd(), path.string());  // learns the key: measures and saves
    probe.at(2, 1);
  }
  nlohmann::json both;
  std::ifstream(path) >> both;
  // The wide model's key now holds the small model's entry.
  std::string small_key, wide_key;
  for (auto& [key, value] : both.items()) {
    if (!value.is_object()) continue;
    (cache.contains(key) ? small_key : wide_key) = key;
  }
  ASSERT_FALSE(small_key.empty());
  ASSERT_FALSE(wide_key.empty());
  both[wide_key] = both[small_key];
  std::ofstream(path) << both.dump();
  CostBook moved(wide, sgd(), path.string());
  moved.at(2, 1);
  EXPECT_EQ(moved.measured(), 1) << "an entry of another model was trusted";
  // An edited cost (below 0) fails the fingerprint; sealed anew, the value check refuses it.
  std::ifstream(path) >> both;
  both[small_key]["costs"][0]["forward_ms"][0] = -1.0;
  seal_cost_cache(both);
  std::ofstream(path) << both.dump();
  CostBook negative(mlp(), sgd(), path.string());
  negative.at(2, 1);
  EXPECT_EQ(negative.measured(), 1) << "a negative cost was trusted";
  std::filesystem::remove(path);
  // Notes are not a cache: refused, and never written over.
  std::ofstream(path) << "my notes\n";
  EXPECT_THROW(CostBook(mlp(), sgd(), path.string()), ConfigError);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "my notes\n");
  std::filesystem::remove(path);
}

// A data-parallel plan's calibration runs its replicas at once on devices of their own and is
// kept per (micro-batch, threads, K, M, R); M stays within the plan's.
TEST_F(PlanSearch, CalibrationRunsEachReplicaCountOnceAndIsCached) {
  const auto path = std::filesystem::temp_directory_path() / "gpipe_plan_calibration_test.json";
  std::filesystem::remove(path);
  CostBook first(mlp(), sgd(), path.string());
  const auto one_key = first.calibration_key(2, 1, 1, 1, 4);  // K=1: M = 2
  const auto two_key = first.calibration_key(2, 1, 1, 2, 1);  // two replicas of M = 1
  EXPECT_EQ(one_key.M, 2);
  EXPECT_EQ(two_key.replicas, 2);
  const double one = first.calibration(one_key);
  const double two = first.calibration(two_key);
  EXPECT_GT(one, 0);
  EXPECT_GT(two, 0);
  const auto cache = cache_section(path, "calibration");
  ASSERT_TRUE(cache.is_array()) << cache.dump();
  std::set<nlohmann::json> keys;
  for (const auto& entry : cache)
    keys.insert(entry.at("key"));
  EXPECT_EQ(keys, (std::set<nlohmann::json>{nlohmann::json(one_key), nlohmann::json(two_key)}));
  CostBook second(mlp(), sgd(), path.string());
  EXPECT_EQ(second.calibration(one_key), one);
  EXPECT_EQ(second.calibration(two_key), two);
  EXPECT_EQ(second.measured(), 0);  // nothing measured again
  std::filesystem::remove(path);
  // Replicas need devices of their own.
  CostBook one_device(mlp(), sgd(), "", 0, {"cpu:0"});
  EXPECT_CONFIG_ERROR(one_device.calibration(two_key), "needs 2 devices, got 1");
}

// Calibrations measured again in rounds give their median, are kept with every round in the
// cache, extra rounds measure again those whose rounds disagree, and a search with rounds measures
// its contenders' calibrations that many times. A cache of the text-named form before typed keys
// is measured again.
TEST_F(PlanSearch, CalibrationsInRoundsGiveTheirMedianAndAreCached) {
  const auto path = std::filesystem::temp_directory_path() / "gpipe_plan_rounds_test.json";
  std::filesystem::remove(path);
  CostBook book(mlp(), sgd(), path.string());
  const auto key = book.calibration_key(2, 1, 1, 1, 4);
  const auto other = book.calibration_key(4, 1, 1, 1, 1);
  const double first = book.calibration(key);
  EXPECT_EQ(book.calibrate_in_rounds({key, other}, 3), 5);  // 2 more of one, 3 of the other
  const auto rounds = book.calibration_rounds(key);
  ASSERT_EQ(rounds.size(), 3u);
  EXPECT_EQ(rounds[0], first);
  EXPECT_EQ(book.calibration(key), median(rounds));
  EXPECT_EQ(book.calibration_rounds(other).size(), 3u);
  EXPECT_EQ(book.calibrate_in_rounds({key, other}, 3), 0);
  EXPECT_CONFIG_ERROR(book.calibrate_in_rounds({key}, 0),
                      "rounds must be >= 1 and extra rounds >= 0, got 0 and 0");
  EXPECT_CONFIG_ERROR(book.calibrate_in_rounds({key}, 1, -1), "got 1 and -1");
  {
    CostBook cached(mlp(), sgd(), path.string());
    EXPECT_EQ(cached.calibration_rounds(key), rounds);
    EXPECT_EQ(cached.measured(), 0);
  }
  // Extra rounds measure again only rounds that disagree: all agree within an unbounded spread,
  // none within 0. (Not 1000%: a 1-step round of this small MLP beside other tests can be
  // preempted for ten times its length - it failed so in ctest -j2.)
  EXPECT_EQ(book.calibrate_in_rounds({key}, 3, 2, std::numeric_limits<double>::infinity()), 0);
  EXPECT_EQ(book.calibrate_in_rounds({key}, 3, 2, 0.0), 2);
  EXPECT_EQ(book.calibration_rounds(key).size(), 5u);
  // A cache written before typed keys names its calibrations by text: it is measured again.
  nlohmann::json cache;
  std::ifstream(path) >> cache;
  model_entry(cache)["calibration"] = {{"2x1x1x2x1", {1.25}}};
  seal_cost_cache(cache);
  std::ofstream(path) << cache.dump();
  CostBook old(mlp(), sgd(), path.string());
  EXPECT_TRUE(old.calibration_rounds(key).empty());
  std::filesystem::remove(path);
  // The search: the fastest plan's calibration has every round.
  CostBook fresh(mlp(), sgd());
  auto request = cpu_request(2, 8);
  request.max_chunks = 2;
  request.calibration_rounds = 2;
  const auto result = search(fresh, request);
  ASSERT_FALSE(result.ranked.empty());
  EXPECT_EQ(
      fresh.calibration_rounds(calibration_key(fresh, request, result.ranked.front().shape)).size(),
      2u);
}

// A re-materialising plan, or one of a split or V schedule, is predicted from its shape's never,
// fused calibration until its own is measured (in rounds, as contenders' and grid shapes' are),
// then from its own, which runs its step with that mode and the family's schedule; both are kept
// in the cache. A family whose representative cannot run the key's K and M is calibrated fused.
TEST_F(PlanSearch, APlanIsScreenedWithTheFusedNeverCalibrationUntilItsOwnIsMeasured) {
  const auto path = std::filesystem::temp_directory_path() / "gpipe_plan_mode_test.json";
  std::filesystem::remove(path);
  CostBook book(mlp(), sgd(), path.string());
  const auto never = book.calibration_key(2, 1, 1, 1, 4);
  const auto always = book.calibration_key(2, 1, 1, 1, 4, Checkpoint::kAlways);
  EXPECT_EQ(always.checkpoint, Checkpoint::kAlways);
  EXPECT_EQ(book.calibration(always), book.calibration(never));
  EXPECT_EQ(book.calibration_in_use(always), never);
  EXPECT_TRUE(book.calibration_rounds(always).empty());
  EXPECT_EQ(book.calibrate_in_rounds({always}, 1), 1);
  EXPECT_EQ(book.calibration_in_use(always), always);
  EXPECT_EQ(book.calibration(always), book.calibration_rounds(always)[0]);
  CostBook cached(mlp(), sgd(), path.string());
  EXPECT_EQ(cached.calibration_rounds(always), book.calibration_rounds(always));
  // Families: K = 1 is always fused; at K = 2 a split and a V key are their own.
  EXPECT_EQ(
      book.calibration_key(2, 1, 1, 1, 4, Checkpoint::kNever, costs::ScheduleFamily::kV).family,
      costs::ScheduleFamily::kFused);
  const auto v = book.calibration_key(2, 1, 2, 1, 4, Checkpoint::kNever, costs::ScheduleFamily::kV);
  const auto split =
      book.calibration_key(2, 1, 2, 1, 4, Checkpoint::kNever, costs::ScheduleFamily::kSplit);
  EXPECT_EQ(v.family, costs::ScheduleFamily::kV);
  EXPECT_EQ(split.family, costs::ScheduleFamily::kSplit);
  EXPECT_EQ(book.calibration_in_use(v), v.screening());
  EXPECT_EQ(book.calibrate_in_rounds({v, split}, 1), 2);
  EXPECT_EQ(book.calibration_in_use(v), v);
  EXPECT_EQ(book.calibration(split), book.calibration_rounds(split)[0]);
  // The planner's key of a zbv shape is the V family's.
  auto request = cpu_request(2, 8);
  PipelineShape zbv;
  zbv.K = 2;
  zbv.M = 4;
  zbv.schedule = ScheduleKind::kZBV;
  zbv.v = 2;
  zbv.checkpoint = Checkpoint::kNever;
  zbv.threads = 1;
  EXPECT_EQ(calibration_key(book, request, zbv), v);
  std::filesystem::remove(path);
}

// A book is of one precision: its costs are measured in it (a bf16 profile keeps fewer activation
// bytes than fp32's), its cache entry is its own, and every plan it predicts carries it, so a
// verify or --plan auto runs what was predicted.
TEST_F(PlanSearch, EachPrecisionHasItsOwnCostsCacheEntryAndPlans) {
  const auto path = std::filesystem::temp_directory_path() / "gpipe_plan_precision_test.json";
  std::filesystem::remove(path);
  CostBook fp32(mlp(), sgd(), path.string());
  CostBook bf16(mlp(), sgd(), path.string(), 0, {}, Precision::kBf16);
  EXPECT_EQ(bf16.precision(), Precision::kBf16);
  const auto& a = fp32.at(8, 1).layers;
  const auto& b = bf16.at(8, 1).layers;
  double fp32_bytes = 0, bf16_bytes = 0;
  for (int64_t i = 0; i + 1 < a.num_layers(); ++i) {
    fp32_bytes += a.output_bytes[i];
    bf16_bytes += b.output_bytes[i];
  }
  EXPECT_EQ(bf16_bytes * 2, fp32_bytes);                    // every boundary in bf16
  EXPECT_EQ(b.output_bytes.back(), a.output_bytes.back());  // the logits stay fp32
  auto request = cpu_request(2, 8);
  request.max_chunks = 2;
  const auto plans = search(bf16, request);
  ASSERT_FALSE(plans.ranked.empty());
  for (const auto& p : plans.ranked)
    EXPECT_EQ(p.shape.precision, Precision::kBf16) << p.shape.describe();
  CostBook cached(mlp(), sgd(), path.string(), 0, {}, Precision::kBf16);
  cached.at(8, 1);
  EXPECT_EQ(cached.measured(), 0) << "the bf16 entry was not cached apart";
  std::filesystem::remove(path);
}

// A plan predicted from another calibration scales its compute by it (no link: the whole
// pipeline and the optimizer step), the all-reduce apart.
TEST_F(PlanSearch, APredictionScalesWithItsCalibration) {
  CostBook book(mlp(), sgd());
  const auto request = cpu_request(2, 8);
  const auto shape = parse_shape("K=2,M=4,schedule=1f1b");
  const auto planned = predict(book, request, shape);
  const auto key = calibration_key(book, request, shape);
  const double slowdown = book.calibration(key);
  EXPECT_EQ(planned.calibration, slowdown);
  const auto twice = predict(book, request, shape, planned.shape.stage_balance(), 2 * slowdown);
  EXPECT_NEAR(twice.pipeline_ms, 2 * planned.pipeline_ms, 1e-9 * planned.pipeline_ms);
  EXPECT_NEAR(twice.update_ms, 2 * planned.update_ms, 1e-9 * planned.update_ms);
  EXPECT_EQ(twice.peak_bytes, planned.peak_bytes);
  // A calibration measured now is another measurement of the same ratio, not kept.
  EXPECT_GT(book.measure_calibration(key), 0);
  EXPECT_EQ(book.calibration_rounds(key).size(), 1u);
  // explain() re-projects the plan with its calibration and splits its step.
  const auto explained = explain(book, request, twice);
  EXPECT_DOUBLE_EQ(explained.step_ms, twice.step_ms);
  ASSERT_TRUE(explained.shares.has_value());
  EXPECT_NEAR(explained.shares->sum(), 1, 1e-9);
}

// The replicas' gradient all-reduce is timed once per (K, R, MiB), kept in the cache, and what a
// data-parallel plan predicts unless a bandwidth is given.
TEST_F(PlanSearch, TheAllReduceIsTimedOncePerWidthAndCached) {
  const auto path = std::filesystem::temp_directory_path() / "gpipe_plan_allreduce_test.json";
  std::filesystem::remove(path);
  CostBook first(mlp(), sgd(), path.string());
  const double one = first.allreduce_ms(1, 2, 3 << 20);  // one group of two replicas, 3 MiB
  const double two = first.allreduce_ms(2, 2, 3 << 20);  // two stages' groups at once
  EXPECT_GT(one, 0);
  EXPECT_GT(two, 0);
  const auto cache = cache_section(path, "allreduce");
  std::set<nlohmann::json> keys;  // (K, R, MiB)
  for (const auto& entry : cache)
    keys.insert(entry.at(0));
  EXPECT_EQ(keys, (std::set<nlohmann::json>{nlohmann::json{1, 2, 3}, nlohmann::json{2, 2, 3}}))
      << cache.dump();
  CostBook second(mlp(), sgd(), path.string());
  EXPECT_EQ(second.allreduce_ms(1, 2, 3 << 20), one);
  EXPECT_EQ(second.allreduce_ms(2, 2, 3 << 20), two);
  std::filesystem::remove(path);
  EXPECT_CONFIG_ERROR(second.allreduce_ms(1, 1, 1 << 20), "replicas >= 2");
  // The MLP's gradients (well under 1 MiB) count as 1 MiB.
  auto request = cpu_request(2, 8);
  const auto shape = parse_shape("K=1,R=2,M=1");
  const auto timed = predict(second, request, shape);
  EXPECT_EQ(timed.allreduce_ms, second.allreduce_ms(1, 2, 1 << 20));
  request.allreduce_gbs = 1.0;  // a ring at 1 GB/s: 2 (R-1)/R x bytes / bandwidth
  const auto ring = predict(second, request, shape);
  double bytes = 0;
  for (double b : second.at(4, 1).layers.parameter_bytes)
    bytes += b;
  EXPECT_NEAR(ring.allreduce_ms, bytes / 1e9 * 1e3, 1e-9);
}

TEST_F(PlanSearch, APlanIsTheTrainersShape) {
  CostBook book(mlp(), sgd());
  const auto request = cpu_request(2, 8);
  auto shape = parse_shape("K=2,M=4,schedule=zbv,checkpoint=always");
  EXPECT_EQ(shape.v, 2);
  EXPECT_EQ(shape.threads, 1);
  const auto plan = predict(book, request, shape);
  // 5 layers (4 hidden and the output) in 4 stages, and their sums on the V's two devices.
  ASSERT_TRUE(plan.shape.balance.per_stage());
  ASSERT_EQ(plan.shape.stage_balance().size(), 4u);
  EXPECT_EQ(plan.shape.device_balance(),
            sum_per_device(ScheduleKind::kZBV, 2, plan.shape.stage_balance()));
  // The printed command, read by the trainer's own flags, gives the plan's shape back, its
  // balance per virtual stage.
  train::TrainOptions options;
  CLI::App app;
  train::add_train_flags(app, options);
  auto flags = to_flags(plan.shape);
  std::reverse(flags.begin(), flags.end());
  app.parse(flags);
  EXPECT_TRUE(options.shape == plan.shape) << options.shape.describe();
  EXPECT_EQ(options.shape.balance.layers, plan.shape.balance.layers);
}

// Only a regular file is read as a schedule: a folder, a device, a name too long for the system
// and a missing file are ConfigErrors naming the path (the fuzzer found the long name throwing
// filesystem_error; tests/fuzz/regressions/parsers).
TEST(PipelineShape, AScheduleFileIsARegularFile) {
  PipelineShape shape;
  EXPECT_CONFIG_ERROR(set_schedule(shape, "file:/"), "is a folder");
  EXPECT_CONFIG_ERROR(set_schedule(shape, "file:/dev/null"), "not a regular file");
  EXPECT_CONFIG_ERROR(set_schedule(shape, "file:" + std::string(5000, 'x')), "cannot read");
  EXPECT_CONFIG_ERROR(set_schedule(shape, "file:no/such/file"), "no/such/file");
  EXPECT_CONFIG_ERROR(parse_shape("K=2,schedule=file:\x01"), "\\x01");
}

// One balance, in its own unit; the other form is derived, as the engine cuts it.
TEST(PipelineShape, HoldsOneBalanceAndDerivesTheOther) {
  auto shape = parse_shape("K=2,M=4,schedule=zbv");  // stages 0 and 3 on device 0, 1 and 2 on 1
  shape.balance = Balance::per_stage({1, 2, 3, 5});
  EXPECT_EQ(shape.device_balance(), (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(shape.stage_balance(), (std::vector<int64_t>{1, 2, 3, 5}));
  const auto options = to_pipeline_options(shape);
  EXPECT_EQ(options.balance(), (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(options.stage_balance(), (std::vector<int64_t>{1, 2, 3, 5}));
  shape.balance = Balance::per_device({4, 2});
  EXPECT_EQ(shape.stage_balance(), (std::vector<int64_t>{2, 1, 1, 2}));
  EXPECT_TRUE(to_pipeline_options(shape).stage_balance().empty());
  shape.balance = Balance::per_device({3, 2});
  EXPECT_CONFIG_ERROR(shape.stage_balance(), "cannot share evenly");
  // A cut per virtual stage stays one where v > 1, and is the devices' own list at v = 1.
  set_stage_balance(shape, {1, 2, 3, 5});
  EXPECT_TRUE(shape.balance.per_stage());
  auto gpipe = parse_shape("K=2,M=4");
  set_stage_balance(gpipe, {3, 4});
  EXPECT_FALSE(gpipe.balance.per_stage());
  EXPECT_EQ(gpipe.stage_balance(), gpipe.device_balance());
  // Without K the stage balance gives it.
  shape.K = 0;
  EXPECT_EQ(shape.device_balance(), (std::vector<int64_t>{6, 5}));
  // Both flags at once are refused, in either order.
  for (const auto& flags :
       {std::vector<std::string>{"1,1,1,1", "--stage-balance", "2,2", "--balance"},
        std::vector<std::string>{"2,2", "--balance", "1,1,1,1", "--stage-balance"}}) {
    train::TrainOptions twice;
    CLI::App both;
    train::add_train_flags(both, twice);
    auto args = flags;
    EXPECT_THROW(both.parse(args), CLI::ValidationError);
  }
}

// Every shape a user or a plan can give survives being printed and read back: as gpipe_train
// flags (one balance; R is not a flag) and as a plan's description (its keys).
TEST(PipelineShape, FlagsAndDescriptionsReadBackAsTheSameShape) {
  // Every kind, and two schedule files (one stage per device, and a V).
  std::vector<PipelineShape> schedules;
  for (auto kind : all_schedule_kinds()) {
    PipelineShape shape;
    shape.schedule = kind;
    shape.v = default_virtual_stages(kind);
    schedules.push_back(shape);
  }
  const auto folder = std::filesystem::temp_directory_path() / "gpipe_test_shape_files";
  std::filesystem::create_directories(folder);
  for (auto kind : {ScheduleKind::kZBH1, ScheduleKind::kDualPipeV}) {
    const auto path = (folder / (to_string(kind) + ".txt")).string();
    std::ofstream(path) << write_schedule(make_schedule(kind, 2, 4, default_virtual_stages(kind)));
    PipelineShape shape;
    set_schedule(shape, "file:" + path);
    ASSERT_EQ(shape.schedule, ScheduleKind::kCustom);
    EXPECT_EQ(shape.schedule_name(), "file:" + path);
    schedules.push_back(shape);
  }
  int cases = 0;
  for (const auto& schedule : schedules) {
    const int64_t v = schedule.v;
    for (auto checkpoint : {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever}) {
      for (bool explicit_layout : {false, true}) {
        PipelineShape shape = schedule;
        shape.K = 2;
        shape.M = 4;
        shape.checkpoint = checkpoint;
        shape.threads = explicit_layout ? 3 : 0;
        if (explicit_layout) {
          shape.devices = {"cpu:0", "cpu:1"};
          if (v > 1) {
            shape.balance = Balance::per_stage({2, 1, 1, 3});
          } else {
            shape.balance = Balance::per_device({4, 3});
          }
        }
        train::TrainOptions options;
        CLI::App app;
        train::add_train_flags(app, options);
        auto flags = to_flags(shape);
        std::reverse(flags.begin(), flags.end());
        app.parse(flags);
        EXPECT_TRUE(options.shape == shape)
            << shape.describe() << " read back as " << options.shape.describe();
        shape.R = 3;
        shape.threads = std::max(shape.threads, 1);
        const auto described = parse_shape(shape.describe());
        EXPECT_EQ(described.describe(), shape.describe());
        EXPECT_TRUE(described.K == shape.K && described.R == shape.R && described.M == shape.M &&
                    described.schedule == shape.schedule &&
                    described.schedule_file == shape.schedule_file && described.v == shape.v &&
                    described.checkpoint == shape.checkpoint && described.threads == shape.threads)
            << shape.describe();
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 6 * static_cast<int>(schedules.size()));
  std::filesystem::remove_all(folder);
  // --devices N is a number of cores to plan for, not a device list.
  train::TrainOptions options;
  CLI::App app;
  train::add_train_flags(app, options);
  app.parse(std::vector<std::string>{"4", "--devices"});
  EXPECT_EQ(options.planning_cores, 4);
  EXPECT_TRUE(options.shape.devices.empty());
  // An empty --balance clears a preset's.
  app.parse(std::vector<std::string>{"", "--balance", "3,2", "--balance"});
  EXPECT_TRUE(options.shape.balance.empty());
}

// Verifying in rounds pools the rounds' steps: the median of all of them, each round's own median,
// and per device the largest peak any round saw. A real plan verified twice adds two rounds.
TEST_F(PlanSearch, MeasuringRoundsPoolTheirSteps) {
  Plan pooled;
  add_measurement(pooled, {3, 1, 2}, {100, 50});
  EXPECT_DOUBLE_EQ(*pooled.measured_step_ms, 2);
  add_measurement(pooled, {10, 20}, {90, 70});
  EXPECT_DOUBLE_EQ(*pooled.measured_step_ms, 3);  // of 1 2 3 10 20
  EXPECT_EQ(pooled.measured_round_ms, (std::vector<double>{2, 15}));
  EXPECT_EQ(pooled.measured_peak_bytes, (std::vector<int64_t>{100, 70}));
  EXPECT_THROW(add_measurement(pooled, {}, {}), Error);

  CostBook book(mlp(), sgd());
  const auto request = cpu_request(2, 8);
  auto plan = predict(book, request, parse_shape("K=2,M=2"));
  verify(plan, book, request, 1, 2);
  verify(plan, book, request, 1, 3);
  ASSERT_EQ(plan.measured_round_ms.size(), 2u);
  ASSERT_EQ(plan.measured_steps_ms.size(), 5u);
  ASSERT_EQ(plan.measured_peak_bytes.size(), 2u);
  for (auto b : plan.measured_peak_bytes)
    EXPECT_GT(b, 0);
  EXPECT_EQ(to_json(plan, request).at("measured_round_ms").size(), 2u);
}

TEST(Plan, ShapesParseAndBadOnesAreNamed) {
  const auto s = parse_shape("K=4,R=2,M=16,schedule=interleaved-1f1b,v=3,threads=2");
  EXPECT_EQ(s.describe(), "K=4,R=2,M=16,schedule=interleaved-1f1b,v=3,checkpoint=never,threads=2");
  EXPECT_CONFIG_ERROR(parse_shape("K=2,Q=3"), "unknown plan key 'Q'");
  EXPECT_CONFIG_ERROR(parse_shape("K=0"), "K needs one integer >= 1");
  EXPECT_CONFIG_ERROR(parse_shape("M"), "'M' is not key=value");
  EXPECT_CONFIG_ERROR(parse_shape("schedule=zigzag"), "zigzag");
}

}  // namespace
}  // namespace gpipe::plan
