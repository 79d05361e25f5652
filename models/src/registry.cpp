// make_model: ModelConfig -> the builder of the named model.
#include "gpipe/models/registry.h"

#include <algorithm>

#include "gpipe/errors.h"
#include "gpipe/models/amoebanet.h"
#include "gpipe/models/mlp.h"
#include "gpipe/models/sleep.h"
#include "gpipe/models/transformer.h"

namespace gpipe::models {

namespace {

std::unique_ptr<ModelBuilder> make_amoebanet(const ModelConfig& c, const Genotype& genotype) {
  return std::make_unique<AmoebaNetBuilder>(AmoebaNetOptions(c.layers, c.filters)
                                                .genotype(genotype)
                                                .classes(c.classes)
                                                .image_size(c.image_size)
                                                .channels(c.channels)
                                                .stem_stride(c.stem_stride)
                                                .dropout(c.dropout)
                                                .drop_path(c.drop_path)
                                                .init_seed(c.init_seed));
}

std::unique_ptr<ModelBuilder> make_amoebanet_d(const ModelConfig& c) {
  return make_amoebanet(c, amoebanet_d_genotype());
}

std::unique_ptr<ModelBuilder> make_amoebanet_b(const ModelConfig& c) {
  return make_amoebanet(c, amoebanet_b_genotype());
}

std::unique_ptr<ModelBuilder> make_transformer(const ModelConfig& c) {
  return std::make_unique<TransformerBuilder>(TransformerOptions(c.layers)
                                                  .d_model(c.d_model)
                                                  .ffn(c.ffn)
                                                  .heads(c.heads)
                                                  .vocab(c.vocab)
                                                  .seq_len(c.seq_len)
                                                  .dropout(c.dropout)
                                                  .init_seed(c.init_seed));
}

std::unique_ptr<ModelBuilder> make_mlp(const ModelConfig& c) {
  return std::make_unique<MlpBuilder>(MlpOptions(c.in_features, c.width, c.layers, c.classes)
                                          .dropout(c.dropout)
                                          .batch_norm(c.batch_norm),
                                      c.init_seed);
}

std::unique_ptr<ModelBuilder> make_sleep(const ModelConfig& c) {
  return std::make_unique<SleepBuilder>(SleepOptions(c.layers, c.layer_ms), c.in_features,
                                        c.init_seed);
}

}  // namespace

const std::vector<ModelEntry>& model_entries() {
  static const std::vector<std::string> amoebanet_knobs{"layers",     "filters",  "classes",
                                                        "image_size", "channels", "stem_stride",
                                                        "dropout",    "drop_path"};
  static const std::vector<ModelEntry> entries{
      {"mlp",
       ModelFamily::kMlp,
       "adam",
       false,
       {"layers", "width", "in_features", "classes", "dropout", "batch_norm"},
       &make_mlp},
      {"sleep",
       ModelFamily::kSleep,
       "adam",
       false,
       {"layers", "in_features", "layer_ms"},
       &make_sleep},
      {"amoebanet-d", ModelFamily::kAmoebaNet, "rmsprop", true, amoebanet_knobs, &make_amoebanet_d},
      {"amoebanet-b", ModelFamily::kAmoebaNet, "rmsprop", false, amoebanet_knobs,
       &make_amoebanet_b},
      {"transformer-l",
       ModelFamily::kTransformer,
       "adam",
       true,
       {"layers", "d_model", "ffn", "heads", "vocab", "seq_len", "dropout"},
       &make_transformer},
  };
  return entries;
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : model_entries())
      out.push_back(entry.name);
    return out;
  }();
  return names;
}

const ModelEntry* find_model(const std::string& name) {
  for (const auto& entry : model_entries()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

const ModelEntry& model_entry(const std::string& name) {
  if (const auto* entry = find_model(name)) return *entry;
  std::string known;
  for (const auto& entry : model_entries())
    known += (known.empty() ? "" : ", ") + entry.name;
  throw ConfigError("unknown model '" + name + "'; known models: " + known);
}

std::unique_ptr<ModelBuilder> make_model(const ModelConfig& c) {
  return model_entry(c.name).make(c);
}

SampleBatch sample_batch(const ModelConfig& config, int64_t batch_size, uint64_t seed) {
  return make_model(config)->sample_batch(batch_size, seed);
}

std::string Knob::flag() const {
  std::string out = "--" + name;
  std::replace(out.begin() + 2, out.end(), '_', '-');
  return out;
}

const std::vector<Knob>& model_knobs() {
  using C = ModelConfig;
  static const std::vector<Knob> knobs{
      {"layers", "normal cells L (AmoebaNet), decoder layers (Transformer-L), hidden layers (mlp)",
       &C::layers},
      {"filters", "filters D, a multiple of 16", &C::filters},
      {"classes", "output classes (a real dataset sets them)", &C::classes},
      {"image_size", "input image size (square); the data is resized to it", &C::image_size},
      {"channels", "input channels (a real dataset sets them)", &C::channels},
      {"stem_stride", "stem stride: 2 (ImageNet) or 1 (keeps small images' resolution)",
       &C::stem_stride},
      {"d_model", "model dimension", &C::d_model},
      {"ffn", "feed-forward dimension", &C::ffn},
      {"heads", "attention heads", &C::heads},
      {"vocab", "vocabulary", &C::vocab},
      {"seq_len", "sequence length", &C::seq_len},
      {"dropout", "dropout probability", &C::dropout},
      {"drop_path", "drop-path probability", &C::drop_path},
      {"width", "hidden width", &C::width},
      {"in_features", "input features", &C::in_features},
      {"batch_norm", "BatchNorm after each hidden Linear", &C::batch_norm},
      {"layer_ms", "forward ms per layer (backward 2x)", &C::layer_ms},
  };
  return knobs;
}

nlohmann::json to_json(const ModelConfig& m) {
  nlohmann::json out{{"name", m.name}};
  for (const auto& knob : model_knobs())
    std::visit([&](auto field) { out[knob.name] = m.*field; }, knob.field);
  return out;
}

nlohmann::json knobs_json(const ModelConfig& config) {
  const auto all = to_json(config);
  nlohmann::json out{{"name", config.name}};
  for (const auto& knob : model_entry(config.name).knobs)
    out[knob] = all.at(knob);
  return out;
}

ModelConfig small_config(const std::string& name) {
  ModelConfig config;
  config.name = name;
  make_model(config);  // throws for an unknown name
  return config;
}

}  // namespace gpipe::models
