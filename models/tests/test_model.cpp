// ModelBuilder: layer-by-layer building that gives the weights of a whole build, counting, and
// the sample batches, for every model of the registry, and the registry entries and model flags
// tools rely on.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <map>

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
  const auto builder = make_model(small_config(GetParam()));
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
  const auto builder = make_model(small_config(GetParam()));
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
  auto config = small_config(GetParam());
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
  const auto builder = make_model(small_config(GetParam()));
  torch::manual_seed(42);
  const auto expected = torch::randn({8});
  torch::manual_seed(42);
  builder->build();
  EXPECT_TRUE(torch::equal(torch::randn({8}), expected));
}

TEST_P(EveryModel, SampleBatchFitsTheModelAndItsLoss) {
  const auto config = small_config(GetParam());
  const auto builder = make_model(config);
  const auto batch = sample_batch(config, 3, /*seed=*/9);
  const auto again = builder->sample_batch(3, 9);
  const auto other = builder->sample_batch(3, 10);
  EXPECT_TRUE(torch::equal(batch.input, again.input));
  EXPECT_TRUE(torch::equal(batch.target, again.target));
  EXPECT_FALSE(torch::equal(batch.input, other.input));
  EXPECT_EQ(batch.input.size(0), 3);
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
  auto config = small_config("amoebanet-b");
  config.channels = 1;
  config.image_size = 28;
  auto batch = sample_batch(config, 2, 0);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_TRUE(((batch.target >= 0) & (batch.target < config.classes)).all().item<bool>());

  config = small_config("transformer-l");
  batch = sample_batch(config, 2, 0);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{2, config.seq_len}));
  EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{2, config.seq_len}));
  // The target is the input shifted by one token.
  EXPECT_TRUE(torch::equal(batch.input.slice(1, 1), batch.target.slice(1, 0, config.seq_len - 1)));

  config = small_config("mlp");
  batch = sample_batch(config, 4, 0);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{4, config.in_features}));
}

TEST(Registry, UnknownModelsAndLayerIndicesAreNamed) {
  ModelConfig config;
  config.name = "resnet";
  try {
    make_model(config);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("resnet"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("amoebanet-d"), std::string::npos) << e.what();
  }
  const auto builder = make_model(small_config("mlp"));
  EXPECT_THROW(builder->build_layer(builder->num_layers()), ConfigError);
  EXPECT_THROW(builder->build_layer(-1), ConfigError);
  EXPECT_THROW(builder->build_range(2, 1), ConfigError);
  EXPECT_THROW(builder->sample_batch(0, 0), ConfigError);
}

TEST(Registry, EntriesSayWhatToolsNeedWithoutComparingNames) {
  EXPECT_EQ(model_names().size(), model_entries().size());
  for (const auto& entry : model_entries()) {
    EXPECT_EQ(&model_entry(entry.name), &entry);
    const auto config = small_config(entry.name);
    const auto all = to_json(config);
    auto expected = nlohmann::json{{"name", entry.name}};
    for (const auto& knob : entry.knobs) {
      ASSERT_TRUE(all.contains(knob)) << entry.name << " lists an unknown knob " << knob;
      expected[knob] = all[knob];
    }
    EXPECT_EQ(knobs_json(config), expected) << entry.name;
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

TEST(Registry, KnobsAModelDoesNotListLeaveItUnchanged) {
  // Every field of ModelConfig, perturbed; a model must not change with a knob it does not list.
  const std::map<std::string, std::function<void(ModelConfig&)>> perturb{
      {"layers", [](ModelConfig& c) { c.layers += 1; }},
      {"filters", [](ModelConfig& c) { c.filters += 16; }},
      {"classes", [](ModelConfig& c) { c.classes += 1; }},
      {"image_size", [](ModelConfig& c) { c.image_size += 8; }},
      {"channels", [](ModelConfig& c) { c.channels += 1; }},
      {"stem_stride", [](ModelConfig& c) { c.stem_stride = 1; }},
      {"d_model", [](ModelConfig& c) { c.d_model += 16; }},
      {"ffn", [](ModelConfig& c) { c.ffn += 16; }},
      {"heads", [](ModelConfig& c) { c.heads *= 2; }},
      {"vocab", [](ModelConfig& c) { c.vocab += 16; }},
      {"seq_len", [](ModelConfig& c) { c.seq_len += 8; }},
      {"dropout", [](ModelConfig& c) { c.dropout = 0.5; }},
      {"drop_path", [](ModelConfig& c) { c.drop_path = 0.5; }},
      {"width", [](ModelConfig& c) { c.width += 8; }},
      {"in_features", [](ModelConfig& c) { c.in_features += 8; }},
      {"batch_norm", [](ModelConfig& c) { c.batch_norm = !c.batch_norm; }},
      {"layer_ms", [](ModelConfig& c) { c.layer_ms += 1; }},
  };
  // The perturbations cover every knob of the table.
  ASSERT_EQ(perturb.size(), model_knobs().size());
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
    const auto base = small_config(entry.name);
    const auto reference = fingerprint(base);
    for (const auto& [knob, change] : perturb) {
      ASSERT_TRUE(to_json(base).contains(knob)) << knob;
      int64_t in_table = 0;
      for (const auto& k : model_knobs())
        in_table += k.name == knob ? 1 : 0;
      ASSERT_EQ(in_table, 1) << knob;
      if (std::find(entry.knobs.begin(), entry.knobs.end(), knob) != entry.knobs.end()) continue;
      auto config = base;
      change(config);
      EXPECT_EQ(fingerprint(config), reference) << entry.name << " changed with " << knob;
    }
  }
}

TEST(ModelFlags, EveryKnobIsAFlagThatNamesTheModelsReadingIt) {
  ModelConfig config;
  CLI::App app;
  add_model_flags(app, config);
  for (const auto& knob : model_knobs()) {
    const auto* option = app.get_option(knob.flag());
    ASSERT_NE(option, nullptr) << knob.flag();
    EXPECT_NE(option->get_description().find("[" + models_reading(knob.name) + "]"),
              std::string::npos)
        << option->get_description();
  }
  EXPECT_EQ(models_reading("filters"), "amoebanet-d, amoebanet-b");
  EXPECT_EQ(models_reading("layers"), "mlp, sleep, amoebanet-d, amoebanet-b, transformer-l");
  EXPECT_EQ(model_knobs()[6].flag(), "--d-model");
}

TEST(ModelFlags, ParseIntoTheConfigAndReportFlagsTheModelIgnores) {
  ModelConfig config;
  CLI::App app;
  add_model_flags(app, config);
  app.parse("--model mlp --width 7 --batch-norm --filters 32", /*program_name_included=*/false);
  EXPECT_EQ(config.name, "mlp");
  EXPECT_EQ(config.width, 7);
  EXPECT_TRUE(config.batch_norm);
  EXPECT_EQ(config.filters, 32);
  const auto ignored = ignored_model_flags(app, config);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_EQ(ignored.front()->name, "filters");

  ModelConfig other;
  CLI::App strict;
  add_model_flags(strict, other);
  EXPECT_THROW(strict.parse("--model resnet", false), CLI::ValidationError);
}

}  // namespace
}  // namespace gpipe::models
