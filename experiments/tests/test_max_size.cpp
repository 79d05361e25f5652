// Tests of max_model_size's logic: the size search, max_model_size's options, and a small real
// search on a tiny model confirmed by measurement. The formatting and normalisation tests are
// test_tables.cpp; measured steps, layer costs and memory, test_costs.cpp. What is asserted is
// what must hold on any machine, never a timing figure.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>

#include "costs/measured_step.h"
#include "costs/projection.h"
#include "gpipe/errors.h"
#include "tables/max_size.h"
#include "tables/size_search.h"
#include "tables/workload.h"
#include "test_util.h"

namespace gpipe::tables {
namespace {

// ---- size search ----------------------------------------------------------------------------

// Families f = 0, 1 with members m = 0..n-1: parameters (f + 1) (m + 1), true peak
// (m + 1) x bytes_per_member[f], predicted = true / error.
struct SyntheticSizes {
  std::vector<size_t> sizes = {20, 20};
  std::vector<double> bytes_per_member = {10, 25};
  double error = 1.0;
  std::set<std::pair<size_t, size_t>> measured;

  SearchCallbacks callbacks() {
    SearchCallbacks cb;
    cb.family_sizes = sizes;
    cb.parameters = [](const SearchPoint& p) {
      return static_cast<double>((p.family + 1) * (p.member + 1));
    };
    cb.predicted_bytes = [this](const SearchPoint& p) { return truth(p) / error; };
    cb.measured_bytes = [this](const SearchPoint& p) {
      measured.insert({p.family, p.member});
      return truth(p);
    };
    return cb;
  }
  double truth(const SearchPoint& p) const {
    return static_cast<double>(p.member + 1) * bytes_per_member[p.family];
  }
};

TEST(SizeSearch, FindsTheLargestTrueFitWhateverTheModelsError) {
  // Budget 100: family 0 fits members 0..9 (params up to 10), family 1 members 0..3 (params up
  // to 8). The answer is family 0, member 9, whether the model is exact, optimistic or
  // pessimistic by a quarter or more.
  for (double error : {1.0, 1.25, 0.625}) {  // exact in binary
    SyntheticSizes sizes;
    sizes.error = error;
    const auto outcome = search_largest(sizes.callbacks(), 100, 8);
    ASSERT_TRUE(outcome.best) << "error " << error;
    EXPECT_EQ(outcome.best->family, 0u) << "error " << error;
    EXPECT_EQ(outcome.best->member, 9u) << "error " << error;
    EXPECT_LE(outcome.steps.size(), 8u);
    EXPECT_NEAR(outcome.scale, error, 1e-9);
    for (const auto& step : outcome.steps) {
      EXPECT_EQ(step.fits, step.measured_bytes <= 100);
    }
  }
}

TEST(SizeSearch, NeverReportsASizeThatWasNotMeasuredToFit) {
  SyntheticSizes sizes;
  sizes.error = 3.0;  // wildly optimistic
  const auto outcome = search_largest(sizes.callbacks(), 100, 3);
  if (outcome.best) {
    EXPECT_TRUE(sizes.measured.count({outcome.best->family, outcome.best->member}));
    EXPECT_LE(sizes.truth(*outcome.best), 100);
  }
}

TEST(SizeSearch, ABudgetTooSmallForTheSmallestSizeFindsNothing) {
  SyntheticSizes sizes;
  const auto outcome = search_largest(sizes.callbacks(), 5, 6);
  EXPECT_FALSE(outcome.best);
  // It measured the smallest member of each family before giving up.
  EXPECT_TRUE(sizes.measured.count({0, 0}));
  EXPECT_TRUE(sizes.measured.count({1, 0}));
  EXPECT_CONFIG_ERROR(search_largest(sizes.callbacks(), 0, 6), "budget must be > 0");
}

// ---- max-size options -----------------------------------------------------------------------

TEST(MaxSizeOptions, ConfigurationsParseAndBadOnesAreNamed) {
  EXPECT_FALSE(parse_size_config("naive-1").pipelined);
  const auto p8 = parse_size_config("pipeline-8");
  EXPECT_TRUE(p8.pipelined);
  EXPECT_EQ(p8.partitions, 8);
  EXPECT_CONFIG_ERROR(parse_size_config("naive-2"), "only naive-1 exists");
  EXPECT_CONFIG_ERROR(parse_size_config("pipeline-0"), "K must be >= 1");
  EXPECT_CONFIG_ERROR(parse_size_config("turbo-8"), "unknown configuration 'turbo-8'");
}

TEST(MaxSizeOptions, FamiliesKeepOnlySizesWithAStagePerDevice) {
  const auto options = max_size_preset("quick");
  const auto& lm = options.models[1];
  ASSERT_EQ(lm.base.name(), "transformer-l");
  const auto families = size_families(lm, parse_size_config("pipeline-8"));
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].front().transformer().layers(),
            6);  // embedding + 6 layers + head = 8 layers
  auto shallow = lm;
  shallow.layers = {1, 2, 3};
  EXPECT_CONFIG_ERROR(size_families(shallow, parse_size_config("pipeline-8")),
                      "pipeline-8 needs a model of at least 8 layers");
  const auto amoeba = size_families(options.models[0], parse_size_config("pipeline-8"));
  EXPECT_EQ(amoeba.size(), options.models[0].layers.size());  // every L has >= 9 layers
  EXPECT_EQ(size_label(amoeba[0][1]), "(3, 32)");
}

TEST(MaxSizeOptions, AmoebaNetKeepsItsDepthBelowPipeline4AndGrowsD) {
  // Table 1's protocol: naive-1, pipeline-1 and pipeline-2 at one L, growing D; deeper from
  // pipeline-4 on. Every row at 12 bytes a parameter; the paper's Transformer gets 16 GiB.
  for (const char* preset : {"quick", "paper"}) {
    const auto options = max_size_preset(preset);
    const auto& amoeba = options.models[0];
    ASSERT_GT(amoeba.fixed_layers, 0) << preset;
    for (const char* config : {"naive-1", "pipeline-1", "pipeline-2"}) {
      const auto families = size_families(amoeba, parse_size_config(config));
      ASSERT_EQ(families.size(), 1u) << preset << " " << config;
      for (const auto& c : families[0])
        EXPECT_EQ(c.amoebanet().layers(), amoeba.fixed_layers);
      EXPECT_GT(families[0].back().amoebanet().filters(),
                families[0].front().amoebanet().filters());
    }
    EXPECT_EQ(size_families(amoeba, parse_size_config("pipeline-4")).size(), amoeba.layers.size());
    EXPECT_EQ(optimizer_state_slots(resolve_optimizer(options.optimizer, "transformer-l")), 1);
  }
  const auto paper = max_size_preset("paper");
  EXPECT_EQ(paper.models[0].fixed_layers, 18);
  EXPECT_EQ(paper.budget_for(paper.models[0]), int64_t{8} << 30);
  EXPECT_EQ(paper.budget_for(paper.models[1]), int64_t{16} << 30);
  // The machine check uses the largest budget: 8 x 16 GiB.
  EXPECT_CONFIG_ERROR(validate(paper, int64_t{100} << 30), "128.00 GiB");
}

TEST(MaxSizeOptions, BadInputIsNamed) {
  auto options = max_size_preset("quick");
  EXPECT_NO_THROW(validate(options, int64_t{24} << 30));
  EXPECT_CONFIG_ERROR(validate(options, int64_t{512} << 20), "more than this machine's");
  options.chunks = 3;
  EXPECT_CONFIG_ERROR(validate(options, 0), "--chunks 3 must divide the mini-batch");
  options = max_size_preset("quick");
  options.configs = {"pipeline-300"};
  EXPECT_CONFIG_ERROR(validate(options, 0), "pipeline-300 needs a model of at least 300 layers");
  EXPECT_CONFIG_ERROR(max_size_preset("tiny"), "unknown preset 'tiny'");
}

// ---- real runs on tiny models ---------------------------------------------------------------

models::ModelConfig tiny_transformer(int64_t layers) {
  models::ModelConfig c("transformer-l");
  c.transformer().layers(layers).d_model(32).ffn(64).heads(2).vocab(64).seq_len(8);
  return c;
}

TEST(Workload, OptimizersResolveByNameAndModel) {
  EXPECT_CONFIG_ERROR(resolve_optimizer("lion", "transformer-l"), "unknown optimizer 'lion'");
  EXPECT_EQ(resolve_optimizer("auto", "amoebanet-d"), "rmsprop");
  EXPECT_EQ(bytes_per_parameter("adam"), 16);
}

TEST(MaxSize, ASmallRealSearchConfirmsItsAnswerByMeasurement) {
  MaxSizeOptions options;
  options.preset = "test";
  options.budget_bytes = int64_t{4} << 20;
  options.configs = {"naive-1", "pipeline-2"};
  options.chunks = 2;
  options.max_measurements = 4;
  options.threads = 1;
  MaxSizeModel lm;
  lm.base = tiny_transformer(1);
  lm.batch = 4;
  lm.layers = {1, 2, 4, 8, 16, 32, 64};
  options.models = {lm};
  const auto result = run_max_size(options);
  ASSERT_EQ(result.rows.size(), 2u);
  for (const auto& r : result.rows) {
    EXPECT_LE(r.max_peak_bytes(), options.budget_bytes) << r.config;
    EXPECT_EQ(static_cast<int64_t>(r.peak_bytes_per_device.size()), r.partitions);
    EXPECT_EQ(r.parameter_bytes, 4 * r.parameters);
    EXPECT_EQ(r.bytes_per_parameter, 12);  // RMSProp: parameter, gradient, square average
    ASSERT_FALSE(r.search.empty());
  }
  // Two devices hold at least as large a model as one.
  EXPECT_GE(*parameter_ratio(result, "transformer-l", "pipeline-2", "naive-1"), 1.0);
  const auto json = to_json(result);
  for (const char* key : {"model", "config", "parameters", "parameter_bytes", "bytes_per_parameter",
                          "layers", "peak_activation_bytes", "peak_bytes_per_device"}) {
    EXPECT_TRUE(json["rows"][0].contains(key)) << key;
  }
  EXPECT_NE(to_markdown(result).find("| naive-1 |"), std::string::npos);

  options.budget_bytes = 1024;
  EXPECT_CONFIG_ERROR(run_max_size(options), "is too small for any transformer-l in naive-1");
}

}  // namespace
}  // namespace gpipe::tables
