// AmoebaNet-D and -B: genotypes, layer plan and shapes, training, the paper's parameter counts,
// pipeline transparency and K-invariance, and bad configurations.
#include <gtest/gtest.h>

#include "gpipe/errors.h"
#include "gpipe/models/amoebanet.h"
#include "gpipe/models/registry.h"
#include "model_test_util.h"

namespace gpipe::models {
namespace {

AmoebaNetOptions small(const Genotype& genotype = amoebanet_d_genotype()) {
  return AmoebaNetOptions(3, 16).genotype(genotype).classes(10).image_size(32);
}

TEST(AmoebaNetGenotype, OperationsParse) {
  using Kind = OperationSpec::Kind;
  EXPECT_EQ(parse_operation("none").kind, Kind::kIdentity);
  auto conv = parse_operation("1x7_7x1");
  EXPECT_EQ(conv.kind, Kind::kConv);
  EXPECT_TRUE(conv.factorized);
  EXPECT_EQ(conv.kernel, 7);
  auto pool = parse_operation("max_pool_2x2");
  EXPECT_EQ(pool.kind, Kind::kMaxPool);
  EXPECT_EQ(pool.kernel, 2);
  EXPECT_EQ(parse_operation("avg_pool_3x3").kind, Kind::kAvgPool);
  auto separable = parse_operation("dil_2_separable_5x5_2");
  EXPECT_EQ(separable.kind, Kind::kSeparable);
  EXPECT_EQ(separable.kernel, 5);
  EXPECT_EQ(separable.repeats, 2);
  EXPECT_EQ(separable.dilation, 2);
  EXPECT_EQ(parse_operation("separable_3x3_2").dilation, 1);
  testing::expect_config_error([] { parse_operation("conv_9x9"); }, "conv_9x9");
}

TEST(AmoebaNetGenotype, PublishedCellsAreWellFormedAndBrokenOnesAreNot) {
  for (const auto* g : {&amoebanet_d_genotype(), &amoebanet_b_genotype()}) {
    EXPECT_NO_THROW(validate_cell(g->normal, false, g->name));
    EXPECT_NO_THROW(validate_cell(g->reduction, true, g->name));
  }
  auto cell = amoebanet_d_genotype().reduction;
  cell.concat = {0, 5, 6};  // state 0 keeps the input's resolution
  testing::expect_config_error([&] { validate_cell(cell, true, "bad"); }, "state 0");
  cell = amoebanet_d_genotype().normal;
  cell.inputs[2] = 3;  // pair 1 cannot read state 3, made by pair 1 itself
  EXPECT_THROW(validate_cell(cell, false, "bad"), ConfigError);
  cell = amoebanet_d_genotype().reduction;
  cell.inputs[7] = 2;  // a 2x2 max pool on a state that does not stride
  EXPECT_THROW(validate_cell(cell, true, "bad"), ConfigError);
}

TEST(AmoebaNet, LayerPlanFollowsTheReference) {
  AmoebaNetBuilder builder(AmoebaNetOptions(6, 32));
  std::vector<std::string> names;
  for (int64_t i = 0; i < builder.num_layers(); ++i)
    names.push_back(builder.layer_name(i));
  EXPECT_EQ(names, (std::vector<std::string>{"stem", "stem_cell_0", "stem_cell_1", "cell_0",
                                             "cell_1", "reduction_0", "cell_2", "cell_3",
                                             "reduction_1", "cell_4", "cell_5", "head"}));
  const auto& plan = builder.plan();
  // Filters D/4, D/2 in the stem cells, then D, 2D, 4D; normal cells concatenate 4 states and
  // AmoebaNet-D's reduction cells 3.
  EXPECT_EQ(plan[1].cell->channels(), 8);
  EXPECT_EQ(plan[2].cell->channels(), 16);
  EXPECT_EQ(plan[3].out_channels, 4 * 32);
  EXPECT_EQ(plan[5].out_channels, 3 * 64);
  EXPECT_EQ(plan[10].out_channels, 4 * 128);
  EXPECT_EQ(plan[10].out_size, 7);  // 224 / 32
  EXPECT_TRUE(plan[3].cell->skip_reduced());
  EXPECT_FALSE(plan[4].cell->skip_reduced());
  EXPECT_TRUE(plan[6].cell->skip_reduced());
}

void expect_shapes(const AmoebaNetOptions& options, int64_t batch) {
  SCOPED_TRACE(options.genotype().name + " image " + std::to_string(options.image_size()) +
               " channels " + std::to_string(options.channels()));
  AmoebaNetBuilder builder(options);
  const auto layers = builder.build();
  Activations x{builder.sample_batch(batch, 0).input};
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    x = layers[i]->forward(x);
    const auto& plan = builder.plan()[i];
    ASSERT_EQ(x[0].sizes(),
              (std::vector<int64_t>{batch, plan.out_channels, plan.out_size, plan.out_size}))
        << plan.name;
    // Cells pass their input on as the next cell's skip; the last one has no next cell.
    const size_t expected = i > 0 && i + 2 < layers.size() ? 2 : 1;
    ASSERT_EQ(x.size(), expected) << plan.name;
  }
  x = layers.back()->forward(x);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].sizes(), (std::vector<int64_t>{batch, options.classes()}));
}

TEST(AmoebaNet, ForwardShapes) {
  for (const auto* genotype : {&amoebanet_d_genotype(), &amoebanet_b_genotype()}) {
    expect_shapes(small(*genotype), 2);
    // Fashion-MNIST as is, the smallest size, odd sizes, ImageNet-like.
    expect_shapes(small(*genotype).channels(1).image_size(28), 2);
    expect_shapes(small(*genotype).image_size(kAmoebaNetMinImageSize), 1);
    expect_shapes(small(*genotype).image_size(45), 1);
    expect_shapes(small(*genotype).image_size(96).layers(1), 1);
  }
}

TEST(AmoebaNet, TrainsOnCpu) {
  testing::expect_trains(AmoebaNetBuilder(small()), 8, 8, 1e-2);
  testing::expect_trains(AmoebaNetBuilder(small(amoebanet_b_genotype()).channels(1).image_size(28)),
                         8, 8, 1e-2);
}

TEST(AmoebaNet, DropPathAndDropoutOnlyInTraining) {
  AmoebaNetBuilder builder(small().drop_path(0.5).dropout(0.5));
  auto layers = builder.build();
  const auto x = builder.sample_batch(4, 0).input;
  for (auto& layer : layers)
    layer->eval();
  const auto a = testing::run_layers(layers, {x})[0];
  const auto b = testing::run_layers(layers, {x})[0];
  EXPECT_TRUE(torch::equal(a, b));
  for (auto& layer : layers)
    layer->train();
  torch::NoGradGuard no_grad;
  const auto c = testing::run_layers(layers, {x})[0];
  const auto d = testing::run_layers(layers, {x})[0];
  EXPECT_FALSE(torch::equal(c, d)) << "drop-path and dropout draw fresh masks in training";
}

// GPipe Table 1 and Table 4 (1000 classes): within 3%. Counted by building each layer.
struct PaperCount {
  const Genotype* genotype;
  int64_t layers, filters;
  double paper;
};

TEST(AmoebaNet, ParameterCountsMatchThePaper) {
  // Counted by interpolation, without building (InterpolatedCountEqualsBuiltLayers checks it).
  for (const auto& c : {PaperCount{&amoebanet_d_genotype(), 18, 208, 82e6},
                        PaperCount{&amoebanet_d_genotype(), 18, 416, 318e6},
                        PaperCount{&amoebanet_d_genotype(), 18, 544, 542e6},
                        PaperCount{&amoebanet_d_genotype(), 36, 544, 1.05e9},
                        PaperCount{&amoebanet_d_genotype(), 72, 512, 1.8e9},
                        PaperCount{&amoebanet_b_genotype(), 18, 512, 557e6}}) {
    AmoebaNetBuilder builder(AmoebaNetOptions(c.layers, c.filters).genotype(*c.genotype));
    const auto count = static_cast<double>(builder.count_parameters());
    EXPECT_NEAR(count / c.paper, 1.0, 0.03)
        << c.genotype->name << " (" << c.layers << ", " << c.filters << "): " << count;
  }
}

TEST(AmoebaNet, InterpolatedCountEqualsBuiltLayers) {
  // D = 64 and 80 (past the three built probes at 16, 32, 48), both genotypes, stride 1 and 2,
  // grayscale and colour, a depth whose reductions fall unevenly.
  for (const auto* genotype : {&amoebanet_d_genotype(), &amoebanet_b_genotype()}) {
    for (const auto& options :
         {AmoebaNetOptions(4, 64).genotype(*genotype).image_size(32), AmoebaNetOptions(2, 80)
                                                                          .genotype(*genotype)
                                                                          .stem_stride(1)
                                                                          .channels(1)
                                                                          .classes(7)
                                                                          .image_size(28)}) {
      AmoebaNetBuilder builder(options);
      ASSERT_TRUE(builder.counts_analytically());
      for (int64_t i = 0; i < builder.num_layers(); ++i) {
        EXPECT_EQ(builder.count_layer_parameters(i), count_parameters({builder.build_layer(i)}))
            << genotype->name << " " << builder.layer_name(i);
      }
    }
  }
  // D = 128: D/4 equals the stem's 32 filters, so the first stem cell has no skip adapter, unlike
  // the probes.
  AmoebaNetBuilder no_adapter(AmoebaNetOptions(3, 128).image_size(33));
  for (int64_t i = 0; i < no_adapter.num_layers(); ++i) {
    EXPECT_EQ(no_adapter.count_layer_parameters(i), count_parameters({no_adapter.build_layer(i)}))
        << no_adapter.layer_name(i);
  }
  // A size no machine here could build is counted at once.
  const int64_t huge = AmoebaNetBuilder(AmoebaNetOptions(18, 65536)).count_parameters();
  EXPECT_GT(huge, int64_t{1} << 40);
}

TEST(AmoebaNet, PipelineIsTransparent) {
  // Training-mode BatchNorm: the plain reference runs micro-batch by micro-batch.
  AmoebaNetBuilder builder(small());
  for (int64_t K : {2, 4})
    testing::expect_transparent(builder, K, /*M=*/3, /*N=*/6, 1e-3, 1e-5);
  // The head alone on the last stage.
  testing::expect_transparent(builder, 9, /*M=*/2, /*N=*/4, 1e-3, 1e-5);
  // Eval-mode BatchNorm (running statistics).
  AmoebaNetBuilder b(small(amoebanet_b_genotype()));
  testing::PipelineRun eval;
  eval.eval_mode = true;
  testing::expect_transparent(b, 4, /*M=*/2, /*N=*/4, 1e-3, 1e-5, eval);
}

TEST(AmoebaNet, EveryScheduleIsTransparent) {
  testing::expect_transparent_under_every_schedule(AmoebaNetBuilder(small()), /*M=*/4, /*N=*/8,
                                                   1e-3, 1e-5);
}

TEST(AmoebaNet, EveryLayerAndOperationSplitsItsBackward) {
  // AmoebaNet-D's and -B's cells together use every operation kind (amoebanet_genotype.h).
  testing::expect_every_layer_splits(AmoebaNetBuilder(small()), /*N=*/4, 1e-4, 1e-6);
  testing::expect_every_layer_splits(AmoebaNetBuilder(small(amoebanet_b_genotype())), /*N=*/4, 1e-4,
                                     1e-6);
}

TEST(AmoebaNet, RunningStatisticsDoNotDependOnKAndSeeTheWholeMiniBatch) {
  AmoebaNetBuilder builder(small());
  const auto batch = builder.sample_batch(6, 4);
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> buffers;
  for (int64_t K : {1, 4}) {
    Pipeline pipe(builder.build(), PipelineOptions(testing::even_balance(builder.num_layers(), K))
                                       .chunks(3)
                                       .threads_per_device(1));
    pipe.set_optimizer([](std::vector<torch::Tensor> params) {
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01));
    });
    pipe.train_step(batch.input, batch.target);
    buffers.push_back(pipe.named_buffers());
  }
  ASSERT_EQ(buffers[0].size(), buffers[1].size());
  for (size_t i = 0; i < buffers[0].size(); ++i) {
    testing::expect_close(buffers[1][i].second, buffers[0][i].second, 1e-4, 1e-6,
                          buffers[0][i].first);
  }
  // The stem's BatchNorm sees the images themselves, so its running statistics are those of a
  // plain full-batch step, although the pipeline normalised three micro-batches apart.
  auto plain = builder.build_layer(0);
  plain->forward({batch.input});
  const auto plain_buffers = plain->named_buffers();
  for (const auto& item : plain_buffers) {
    if (item.key().find("running") == std::string::npos) continue;
    const auto it = std::find_if(buffers[1].begin(), buffers[1].end(),
                                 [&](const auto& b) { return b.first == "0." + item.key(); });
    ASSERT_NE(it, buffers[1].end()) << item.key();
    testing::expect_close(it->second, item.value(), 1e-4, 1e-6, item.key());
  }
}

TEST(AmoebaNet, LossesDoNotDependOnKWithDropPathAndDropout) {
  testing::expect_k_invariant(AmoebaNetBuilder(small().drop_path(0.3).dropout(0.5)),
                              AmoebaNetBuilder(small()), /*M=*/2, /*N=*/4, /*steps=*/2);
}

TEST(AmoebaNet, BadConfigurationsNameTheValue) {
  testing::expect_config_error([] { AmoebaNetBuilder(AmoebaNetOptions(3, 200)); }, "got 200");
  testing::expect_config_error([] { AmoebaNetBuilder(AmoebaNetOptions(3, 8)); }, "got 8");
  testing::expect_config_error([] { AmoebaNetBuilder(AmoebaNetOptions(0, 16)); }, "layers (L) = 0");
  testing::expect_config_error([] { AmoebaNetBuilder(small().image_size(16)); },
                               "image size 16 is too small");
  testing::expect_config_error([] { AmoebaNetBuilder(small().classes(0)); }, "class, got 0");
  testing::expect_config_error([] { AmoebaNetBuilder(small().drop_path(1.0)); }, "drop-path");
  // Through the registry, as the command-line tools see it.
  ModelConfig config("amoebanet-d");
  config.amoebanet().filters(100);
  testing::expect_config_error([&] { make_model(config); }, "got 100");
  // A wrong input reaches the stem, which names what it expected.
  AmoebaNetBuilder builder(small());
  const auto stem = builder.build_layer(0);
  testing::expect_config_error(
      [&] {
        stem->forward({torch::zeros({1, 1, 32, 32})});
      },
      "(N, 3, H, W)");
}

}  // namespace
}  // namespace gpipe::models
