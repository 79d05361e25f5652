// ModelBuilder: layer-by-layer building that gives the weights of a whole build, counting, and
// the sample batches, for every model of the registry, and the registry entries and model flags
// tools rely on.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "expect_error.h"
#include "gpipe/errors.h"
#include "gpipe/models/model_flags.h"
#include "gpipe/models/registry.h"
#include "model_test_util.h"

namespace gpipe::models {
namespace {

void expect_same_weights(const LayerPtr& a, const LayerPtr& b, const std::string& what) {
  const auto pa = a->named_parameters();
  const auto pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size()) << what;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].key(), pb[i].key()) << what;
    EXPECT_TRUE(torch::equal(pa[i].value(), pb[i].value())) << what << " " << pa[i].key();
  }
}

class EveryModel : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryModel, BuildingARangeGivesTheWeightsOfTheWholeModel) {
  const auto builder = make_model(ModelConfig(GetParam()));
  const int64_t n = builder->num_layers();
  ASSERT_GE(n, 3);
  const auto all = builder->build();
  ASSERT_EQ(static_cast<int64_t>(all.size()), n);
  // The second half first, then the first half, then one layer alone: order does not matter.
  const auto back = builder->build_range(n / 2, n);
  const auto front = builder->build_range(0, n / 2);
  const auto single = builder->build_layer(n - 2);
  for (int64_t i = 0; i < n; ++i) {
    const auto& piece = i < n / 2 ? front[i] : back[i - n / 2];
    expect_same_weights(piece, all[i], builder->layer_name(i));
  }
  expect_same_weights(single, all[n - 2], "single layer");
}

TEST_P(EveryModel, LayersAreNamedAndCountedWithoutBuildingTheModel) {
  const auto builder = make_model(ModelConfig(GetParam()));
  const auto layers = builder->build();
  const auto counts = builder->layer_parameters();
  ASSERT_EQ(counts.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(layers[i]->label(), builder->layer_name(static_cast<int64_t>(i)));
    EXPECT_EQ(counts[i], count_parameters({layers[i]})) << layers[i]->label();
  }
  EXPECT_EQ(builder->count_parameters(), count_parameters(layers));
  EXPECT_GT(builder->count_parameters(), 0);
}

TEST_P(EveryModel, TheInitSeedKeysTheWeights) {
  auto config = ModelConfig(GetParam());
  const auto a = make_model(config)->build_layer(0);
  config.init_seed = 1;
  const auto b = make_model(config)->build_layer(0);
  const auto pa = a->parameters();
  const auto pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_FALSE(pa.empty());
  bool differ = false;
  for (size_t i = 0; i < pa.size(); ++i)
    differ = differ || !torch::equal(pa[i], pb[i]);
  // The sleep model's only parameter is a scale initialised to one, whatever the seed.
  EXPECT_EQ(differ, GetParam() != "sleep");
}

TEST_P(EveryModel, BuildingLeavesTheDefaultGeneratorAlone) {
  const auto builder = make_model(ModelConfig(GetParam()));
  torch::manual_seed(42);
  const auto expected = torch::randn({8});
  torch::manual_seed(42);
  builder->build();
  EXPECT_TRUE(torch::equal(torch::randn({8}), expected));
}

TEST_P(EveryModel, SampleBatchFitsTheModelAndItsLoss) {
  const auto config = ModelConfig(GetParam());
  const auto builder = make_model(config);
  const auto batch = sample_batch(config, 3, /*seed=*/9);
  const auto again = builder->sample_batch(3, 9);
  const auto other = builder->sample_batch(3, 10);
  EXPECT_TRUE(torch::equal(batch.input, again.input));
  EXPECT_TRUE(torch::equal(batch.target, again.target));
  EXPECT_FALSE(torch::equal(batch.input, other.input));
  EXPECT_EQ(batch.input.size(0), 3);
  EXPECT_EQ(batch.input.sizes().slice(1).vec(), builder->sample_shape());
  EXPECT_EQ(batch.target.size(0), 3);
  EXPECT_EQ(batch.target.scalar_type(), torch::kLong);
  const auto output = testing::run_layers(builder->build(), {batch.input});
  const auto loss = builder->loss()(output, batch.target);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryModel, ::testing::ValuesIn(model_names()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (auto& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(Registry, SampleBatchShapes) {
  ModelConfig config("amoebanet-b");
  config.amoebanet().channels(1).image_size(28);
  auto batch = sample_batch(config, 2, 0);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_TRUE(
      ((batch.target >= 0) & (batch.target < config.amoebanet().classes())).all().item<bool>());

  config = ModelConfig("transformer-l");
  const int64_t seq_len = config.transformer().seq_len();
  batch = sample_batch(config, 2, 0);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{2, seq_len}));
  EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{2, seq_len}));
  // The target is the input shifted by one token.
  EXPECT_TRUE(torch::equal(batch.input.slice(1, 1), batch.target.slice(1, 0, seq_len - 1)));

  config = ModelConfig("mlp");
  batch = sample_batch(config, 4, 0);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{4, config.mlp().in_features()}));
}

TEST(Registry, UnknownModelsAndLayerIndicesAreNamed) {
  ::gpipe::testing::expect_error<ConfigError>([] { (void)ModelConfig("resnet"); },
                                              {"resnet", "amoebanet-d"});
  const auto builder = make_model(ModelConfig("mlp"));
  EXPECT_THROW(builder->build_layer(builder->num_layers()), ConfigError);
  EXPECT_THROW(builder->build_layer(-1), ConfigError);
  EXPECT_THROW(builder->build_range(2, 1), ConfigError);
  EXPECT_THROW(builder->sample_batch(0, 0), ConfigError);
}

TEST(Registry, EntriesSayWhatToolsNeedWithoutComparingNames) {
  EXPECT_EQ(model_names().size(), model_entries().size());
  for (const auto& entry : model_entries()) {
    EXPECT_EQ(&model_entry(entry.name), &entry);
    // A config's JSON is its name and its family's knobs, and reads back as the same config.
    const ModelConfig config(entry.name);
    const auto json = to_json(config);
    EXPECT_EQ(json.size(), entry.knobs.size() + 1) << json.dump();
    for (const auto& knob : entry.knobs)
      EXPECT_TRUE(json.contains(knob.name)) << entry.name << " " << knob.name;
    EXPECT_EQ(to_json(model_config_from_json(json)), json);
  }
  // The paper's runs: RMSProp for AmoebaNet, Adam for Transformer-L; Tables 1-3 cover
  // AmoebaNet-D and Transformer-L only.
  EXPECT_EQ(model_entry("amoebanet-b").family, ModelFamily::kAmoebaNet);
  EXPECT_EQ(model_entry("amoebanet-d").default_optimizer, "rmsprop");
  EXPECT_EQ(model_entry("transformer-l").default_optimizer, "adam");
  std::vector<std::string> paper;
  for (const auto& entry : model_entries()) {
    if (entry.in_paper_tables) paper.push_back(entry.name);
  }
  EXPECT_EQ(paper, (std::vector<std::string>{"amoebanet-d", "transformer-l"}));
  EXPECT_EQ(find_model("resnet"), nullptr);
  EXPECT_THROW(model_entry("resnet"), ConfigError);
}

TEST(Registry, AConfigHoldsItsFamilysOptionsOnly) {
  ModelConfig config("mlp");
  EXPECT_TRUE(std::holds_alternative<MlpOptions>(config.options()));
  ::gpipe::testing::expect_error<ConfigError>([&] { config.amoebanet(); }, {"mlp", "MlpOptions"});
  ::gpipe::testing::expect_error<ConfigError>([&] { set_knob(config, "filters", int64_t{32}); },
                                              {"mlp", "filters", "amoebanet-d, amoebanet-b"});
  ::gpipe::testing::expect_error<ConfigError>([&] { set_knob(config, "width", true); },
                                              {"width", "an integer"});
  ::gpipe::testing::expect_error<ConfigError>(
      [] {
        model_config_from_json({{"name", "mlp"}, {"heads", 2}});
      },
      {"mlp", "heads", "transformer-l"});
  ::gpipe::testing::expect_error<ConfigError>(
      [] {
        model_config_from_json({{"layers", 2}});
      },
      {"name"});
  set_knob(config, "dropout", int64_t{0});  // an integer for a real knob is a real
  EXPECT_EQ(config.mlp().dropout(), 0.0);
  // Another model of the family keeps the options; another family starts from its small config.
  config = ModelConfig("amoebanet-d");
  config.amoebanet().filters(32);
  config.set_name("amoebanet-b");
  EXPECT_EQ(config.amoebanet().filters(), 32);
  config.set_name("transformer-l");
  EXPECT_EQ(to_json(config), to_json(ModelConfig("transformer-l")));
}

TEST(Registry, EveryKnobReachesTheModel) {
  // Each knob, perturbed, changes the model it configures (its layers, parameters, sample batch
  // or output), so no knob table entry points at the wrong option.
  const std::map<std::string, KnobValue> changed{
      {"layers", int64_t{4}},       {"filters", int64_t{32}}, {"classes", int64_t{7}},
      {"image_size", int64_t{40}},  {"channels", int64_t{1}}, {"stem_stride", int64_t{1}},
      {"d_model", int64_t{80}},     {"ffn", int64_t{128}},    {"heads", int64_t{8}},
      {"vocab", int64_t{300}},      {"seq_len", int64_t{40}}, {"width", int64_t{72}},
      {"in_features", int64_t{40}}, {"batch_norm", true},     {"dropout", 0.5},
      {"drop_path", 0.5},           {"layer_ms", 2.0}};
  ASSERT_EQ(changed.size(), model_knob_names().size());
  // Training-only knobs (dropout, drop-path) and the sleep model's time leave an eval forward
  // alone; for them the builder's options must show the value.
  const std::set<std::string> not_in_forward{"dropout", "drop_path", "layer_ms"};
  auto fingerprint = [](const ModelConfig& c) {
    const auto builder = make_model(c);
    const auto batch = builder->sample_batch(2, 0);
    const auto layers = builder->build();
    std::vector<int64_t> out{builder->num_layers(), count_parameters(layers)};
    for (auto size : batch.input.sizes())
      out.push_back(size);
    torch::NoGradGuard no_grad;
    for (auto& layer : layers)
      layer->eval();
    Activations x{batch.input};
    for (auto& layer : layers)
      x = layer->forward(x);
    out.push_back(static_cast<int64_t>(x.front().sum().item<double>() * 1e6));
    return out;
  };
  for (const auto& entry : model_entries()) {
    const ModelConfig base(entry.name);
    const auto reference = fingerprint(base);
    for (const auto& knob : entry.knobs) {
      auto config = base;
      set_knob(config, knob.name, changed.at(knob.name));
      EXPECT_EQ(get_knob(config, knob.name), changed.at(knob.name)) << entry.name << knob.name;
      if (not_in_forward.count(knob.name) > 0) continue;
      EXPECT_NE(fingerprint(config), reference) << entry.name << " ignores " << knob.name;
    }
  }
  const auto sleep = make_model([] {
    ModelConfig c("sleep");
    set_knob(c, "layer_ms", 2.0);
    return c;
  }());
  EXPECT_EQ(dynamic_cast<const SleepBuilder&>(*sleep).options().forward_ms(), 2.0);
}

TEST(ModelFlags, EveryKnobIsAFlagThatNamesTheModelsReadingIt) {
  ModelConfig config;
  CLI::App app;
  add_model_flags(app, config);
  for (const auto& name : model_knob_names()) {
    const auto* option = app.get_option(knob_flag(name));
    ASSERT_NE(option, nullptr) << knob_flag(name);
    for (const auto& entry : model_entries()) {
      if (const auto* knob = entry.knob(name)) {
        EXPECT_NE(option->get_description().find(knob->help), std::string::npos)
            << option->get_description();
        EXPECT_NE(option->get_description().find(entry.name), std::string::npos)
            << option->get_description();
      }
    }
  }
  EXPECT_EQ(models_reading("filters"), "amoebanet-d, amoebanet-b");
  EXPECT_EQ(models_reading("layers"), "mlp, sleep, amoebanet-d, amoebanet-b, transformer-l");
  EXPECT_EQ(knob_flag("d_model"), "--d-model");
  // Each family's meaning, with its readers.
  EXPECT_NE(app.get_option("--layers")
                ->get_description()
                .find("normal cells L [amoebanet-d, amoebanet-b]; decoder layers [transformer-l]"),
            std::string::npos);
}

TEST(ModelFlags, ParseIntoTheConfigAndReportFlagsTheModelIgnores) {
  ModelConfig config;
  CLI::App app;
  add_model_flags(app, config);
  app.parse("--model mlp --width 7 --batch-norm --filters 32", /*program_name_included=*/false);
  EXPECT_EQ(config.name(), "mlp");
  EXPECT_EQ(config.mlp().width(), 7);
  EXPECT_TRUE(config.mlp().batch_norm());
  EXPECT_EQ(ignored_model_flags(app, config), std::vector<std::string>{"filters"});

  ModelConfig other;
  CLI::App strict;
  add_model_flags(strict, other);
  EXPECT_THROW(strict.parse("--model resnet", false), CLI::ValidationError);
}

TEST(ModelFlags, KnobsAndTheModelMayComeInAnyOrder) {
  for (const char* line : {"--layers 5 --d-model 32 --model transformer-l",
                           "--model transformer-l --layers 5 --d-model 32"}) {
    ModelConfig config;
    CLI::App app;
    add_model_flags(app, config);
    app.parse(line, false);
    ASSERT_EQ(config.name(), "transformer-l") << line;
    EXPECT_EQ(config.transformer().layers(), 5) << line;
    EXPECT_EQ(config.transformer().d_model(), 32) << line;
  }
  // A tool's own starting config keeps what the command line does not set.
  ModelConfig preset("transformer-l");
  preset.transformer().d_model(128);
  CLI::App app;
  add_model_flags(app, preset);
  app.parse("--layers 2", false);
  EXPECT_EQ(preset.transformer().layers(), 2);
  EXPECT_EQ(preset.transformer().d_model(), 128);
}

}  // namespace
}  // namespace gpipe::models
