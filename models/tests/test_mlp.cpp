#include <gtest/gtest.h>

#include "gpipe/errors.h"
#include "gpipe/models/mlp.h"
#include "model_test_util.h"

namespace gpipe::models {
namespace {

TEST(Mlp, LayersShapesAndParameters) {
  const auto layers = make_mlp(MlpOptions(10, 32, 3, 4));
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(count_parameters(layers), (10 * 32 + 32) + 2 * (32 * 32 + 32) + (32 * 4 + 4));
  Activations x{torch::randn({5, 10})};
  for (const auto& layer : layers)
    x = layer->forward(x);
  EXPECT_EQ(x[0].sizes(), (std::vector<int64_t>{5, 4}));
}

TEST(Mlp, AnalyticCountEqualsBuiltLayers) {
  for (const bool batch_norm : {false, true}) {
    for (const auto& options : {MlpOptions(5, 16, 3, 7), MlpOptions(9, 4, 0, 2)}) {
      MlpBuilder builder(MlpOptions(options).batch_norm(batch_norm));
      for (int64_t i = 0; i < builder.num_layers(); ++i) {
        EXPECT_EQ(builder.count_layer_parameters(i), count_parameters({builder.build_layer(i)}))
            << builder.layer_name(i) << " batch_norm " << batch_norm;
      }
    }
  }
}

TEST(Mlp, BadSizes) {
  EXPECT_THROW(make_mlp(MlpOptions(0, 4, 1, 2)), ConfigError);
  EXPECT_THROW(make_mlp(MlpOptions(3, 4, -1, 2)), ConfigError);
}

TEST(Mlp, EveryLayerSplitsItsBackward) {
  // gpipe::Linear, ReLU, deferred BatchNorm: B then W equals one whole backward.
  testing::expect_every_layer_splits(MlpBuilder(MlpOptions(12, 16, 4, 5).batch_norm(true)),
                                     /*N=*/6, 1e-5, 1e-6);
}

}  // namespace
}  // namespace gpipe::models
