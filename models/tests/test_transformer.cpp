// Transformer-L: shapes, causality, training, the paper's parameter counts (analytic count
// checked against built layers), pipeline transparency and K-invariance, bad configurations.
#include <gtest/gtest.h>

#include "gpipe/errors.h"
#include "gpipe/models/registry.h"
#include "gpipe/models/transformer.h"
#include "model_test_util.h"

namespace gpipe::models {
namespace {

TransformerOptions small() {
  return TransformerOptions(2).d_model(32).ffn(64).heads(4).vocab(50).seq_len(12);
}

TEST(Transformer, LayersAndShapes) {
  TransformerBuilder builder(small());
  ASSERT_EQ(builder.num_layers(), 4);
  EXPECT_EQ(builder.layer_name(0), "embedding");
  EXPECT_EQ(builder.layer_name(1), "layer_0");
  EXPECT_EQ(builder.layer_name(3), "head");
  const auto layers = builder.build();
  const auto tokens = builder.sample_batch(3, 0).input;
  Activations x{tokens};
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    x = layers[i]->forward(x);
    ASSERT_EQ(x.size(), 1u);
    EXPECT_EQ(x[0].sizes(), (std::vector<int64_t>{3, 12, 32})) << layers[i]->label();
  }
  x = layers.back()->forward(x);
  EXPECT_EQ(x[0].sizes(), (std::vector<int64_t>{3, 12, 50}));
  // Shorter sequences work; longer ones and float inputs are refused by name.
  EXPECT_EQ(testing::run_layers(layers, {tokens.slice(1, 0, 5)})[0].sizes(),
            (std::vector<int64_t>{3, 5, 50}));
  testing::expect_config_error(
      [&] {
        layers[0]->forward({torch::zeros({1, 13}, torch::kLong)});
      },
      "sequence length 13");
  testing::expect_config_error([&] { layers[0]->forward({torch::zeros({1, 4})}); }, "int64");
}

TEST(Transformer, IsCausal) {
  TransformerBuilder builder(small());
  auto layers = builder.build();
  auto tokens = builder.sample_batch(2, 0).input;
  const auto before = testing::run_layers(layers, {tokens})[0];
  auto changed = tokens.clone();
  changed.select(1, 7).fill_(0);
  changed.select(1, 7).add_(tokens.select(1, 7).add(1).remainder(50));
  const auto after = testing::run_layers(layers, {changed})[0];
  EXPECT_TRUE(torch::allclose(before.slice(1, 0, 7), after.slice(1, 0, 7), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(before.slice(1, 7), after.slice(1, 7), 1e-5, 1e-6));
}

TEST(Transformer, TrainsOnCpu) {
  testing::expect_trains(TransformerBuilder(small()), 4, 10, 3e-3);
}

TEST(Transformer, AnalyticCountEqualsBuiltLayers) {
  for (const auto& options : {small(), small().layers(1).d_model(48).heads(3).ffn(40).vocab(7),
                              TransformerOptions(1).d_model(16).ffn(16).heads(1).vocab(1)}) {
    TransformerBuilder builder(options);
    const auto layers = builder.build();
    for (int64_t i = 0; i < builder.num_layers(); ++i) {
      EXPECT_EQ(builder.count_layer_parameters(i), count_parameters({layers[i]}))
          << builder.layer_name(i);
    }
  }
  // At the paper's dimensions too, one layer of each kind (about 200 MB each, built in turn).
  TransformerBuilder paper(TransformerOptions(1));
  for (int64_t i = 0; i < paper.num_layers(); ++i) {
    EXPECT_EQ(paper.count_layer_parameters(i), count_parameters({paper.build_layer(i)}))
        << paper.layer_name(i);
  }
}

TEST(Transformer, ParameterCountsMatchThePaper) {
  // GPipe Table 1: d_model 2048, ffn 8192, 32 heads, vocabulary 32k; within 1%.
  for (const auto& [layers, paper] :
       {std::pair<int64_t, double>{3, 282.2e6}, std::pair<int64_t, double>{13, 785.8e6},
        std::pair<int64_t, double>{103, 5.3e9}}) {
    TransformerBuilder builder((TransformerOptions(layers)));
    const auto count = static_cast<double>(builder.count_parameters());
    EXPECT_NEAR(count / paper, 1.0, 0.01) << "L=" << layers << ": " << count;
  }
}

TEST(Transformer, PipelineIsTransparent) {
  TransformerBuilder builder(small().layers(4));
  for (int64_t K : {2, 4})
    testing::expect_transparent(builder, K, /*M=*/2, /*N=*/4, 1e-4, 1e-6);
}

TEST(Transformer, EveryScheduleIsTransparent) {
  testing::expect_transparent_under_every_schedule(TransformerBuilder(small().layers(4)), /*M=*/4,
                                                   /*N=*/8, 1e-4, 1e-6);
}

TEST(Transformer, EveryBlockSplitsItsBackward) {
  testing::expect_every_layer_splits(TransformerBuilder(small().layers(2)), /*N=*/4, 1e-4, 1e-6);
}

TEST(Transformer, LossesDoNotDependOnKWithDropout) {
  testing::expect_k_invariant(TransformerBuilder(small().layers(4).dropout(0.2)),
                              TransformerBuilder(small().layers(4)), /*M=*/2, /*N=*/4,
                              /*steps=*/3);
}

TEST(Transformer, BadConfigurationsNameTheValue) {
  testing::expect_config_error([] { TransformerBuilder(small().heads(5)); }, "d_model=32 heads=5");
  testing::expect_config_error([] { TransformerBuilder(small().layers(0)); }, "layers (L) = 0");
  testing::expect_config_error([] { TransformerBuilder(small().d_model(33).heads(3)); },
                               "even d_model, got 33");
  testing::expect_config_error([] { TransformerBuilder(small().vocab(0)); }, "vocab=0");
  ModelConfig config("transformer-l");
  config.transformer().heads(7);
  testing::expect_config_error([&] { make_model(config); }, "heads=7");
}

}  // namespace
}  // namespace gpipe::models
