// The registry: each family's options, knobs and small configuration; make_model.
#include "gpipe/models/registry.h"

#include <algorithm>

#include "gpipe/errors.h"

namespace gpipe::models {

namespace {

// The genotype follows the registry name (amoebanet-d or -b), whatever the options hold.
std::unique_ptr<ModelBuilder> make_amoebanet(const ModelConfig& c, const Genotype& genotype) {
  return std::make_unique<AmoebaNetBuilder>(AmoebaNetOptions(c.amoebanet()).genotype(genotype),
                                            c.init_seed);
}

std::unique_ptr<ModelBuilder> make_amoebanet_d(const ModelConfig& c) {
  return make_amoebanet(c, amoebanet_d_genotype());
}

std::unique_ptr<ModelBuilder> make_amoebanet_b(const ModelConfig& c) {
  return make_amoebanet(c, amoebanet_b_genotype());
}

std::unique_ptr<ModelBuilder> make_transformer(const ModelConfig& c) {
  return std::make_unique<TransformerBuilder>(TransformerOptions(c.transformer()), c.init_seed);
}

std::unique_ptr<ModelBuilder> make_mlp(const ModelConfig& c) {
  return std::make_unique<MlpBuilder>(c.mlp(), c.init_seed);
}

std::unique_ptr<ModelBuilder> make_sleep(const ModelConfig& c) {
  return std::make_unique<SleepBuilder>(c.sleep(), c.init_seed);
}

// The small configurations: each trains on a CPU in seconds.
ModelOptions small_mlp() {
  return MlpOptions(32, 64, 3, 10);
}
ModelOptions small_sleep() {
  return SleepOptions(3, 1.0).features(32);
}
ModelOptions small_amoebanet() {
  return AmoebaNetOptions(3, 16).classes(10).image_size(32);
}
ModelOptions small_transformer() {
  return TransformerOptions(3).d_model(64).ffn(256).heads(4).vocab(256).seq_len(32);
}

// A knob of the family whose options type is Options; `field` returns the option's reference
// (a TORCH_ARG accessor).
template <class Options, class Field>
Knob knob(std::string name, std::string help, Field field) {
  using T = std::decay_t<decltype(field(std::declval<Options&>()))>;
  Knob out{std::move(name), std::move(help), nullptr, nullptr};
  out.get = [field](const ModelConfig& c) { return KnobValue(field(c.as<Options>())); };
  out.set = [field, name = out.name](ModelConfig& c, const KnobValue& value) {
    if (const auto* v = std::get_if<T>(&value)) {
      field(c.as<Options>()) = *v;
      return;
    }
    if constexpr (std::is_same_v<T, double>) {  // an integer where a real is wanted is one
      if (const auto* v = std::get_if<int64_t>(&value)) {
        field(c.as<Options>()) = static_cast<double>(*v);
        return;
      }
    }
    throw ConfigError(c10::str("the model knob '", name, "' of ", c.name(), " takes ",
                               std::is_same_v<T, bool>      ? "true or false"
                               : std::is_same_v<T, int64_t> ? "an integer"
                                                            : "a number"));
  };
  return out;
}

// TORCH_ARG accessor `name` of any options type, as a knob's field.
#define GPIPE_FIELD(name) \
  [](auto& o) -> auto& {  \
    return o.name();      \
  }

std::vector<Knob> mlp_knobs() {
  using O = MlpOptions;
  return {knob<O>("layers", "hidden layers", GPIPE_FIELD(depth)),
          knob<O>("width", "hidden width", GPIPE_FIELD(width)),
          knob<O>("in_features", "input features", GPIPE_FIELD(in_features)),
          knob<O>("classes", "output classes (a real dataset sets them)", GPIPE_FIELD(classes)),
          knob<O>("dropout", "dropout after each hidden ReLU", GPIPE_FIELD(dropout)),
          knob<O>("batch_norm", "BatchNorm after each hidden Linear", GPIPE_FIELD(batch_norm))};
}

std::vector<Knob> sleep_knobs() {
  using O = SleepOptions;
  return {knob<O>("layers", "layers", GPIPE_FIELD(layers)),
          knob<O>("in_features", "feature width (and classes)", GPIPE_FIELD(features)),
          knob<O>("layer_ms", "forward ms per layer (backward 2x)", GPIPE_FIELD(forward_ms))};
}

std::vector<Knob> amoebanet_knobs() {
  using O = AmoebaNetOptions;
  return {knob<O>("layers", "normal cells L", GPIPE_FIELD(layers)),
          knob<O>("filters", "filters D, a multiple of 16", GPIPE_FIELD(filters)),
          knob<O>("classes", "output classes (a real dataset sets them)", GPIPE_FIELD(classes)),
          knob<O>("image_size", "input image size (square); the data is resized to it",
                  GPIPE_FIELD(image_size)),
          knob<O>("channels", "input channels (a real dataset sets them)", GPIPE_FIELD(channels)),
          knob<O>("stem_stride", "stem stride: 2 (ImageNet) or 1 (keeps small images' resolution)",
                  GPIPE_FIELD(stem_stride)),
          knob<O>("dropout", "dropout before the classifier", GPIPE_FIELD(dropout)),
          knob<O>("drop_path", "drop-path probability", GPIPE_FIELD(drop_path))};
}

std::vector<Knob> transformer_knobs() {
  using O = TransformerOptions;
  return {knob<O>("layers", "decoder layers", GPIPE_FIELD(layers)),
          knob<O>("d_model", "model dimension", GPIPE_FIELD(d_model)),
          knob<O>("ffn", "feed-forward dimension", GPIPE_FIELD(ffn)),
          knob<O>("heads", "attention heads", GPIPE_FIELD(heads)),
          knob<O>("vocab", "vocabulary", GPIPE_FIELD(vocab)),
          knob<O>("seq_len", "sequence length", GPIPE_FIELD(seq_len)),
          knob<O>("dropout", "dropout everywhere the decoder has it", GPIPE_FIELD(dropout))};
}

#undef GPIPE_FIELD

}  // namespace

const std::vector<ModelEntry>& model_entries() {
  static const std::vector<ModelEntry> entries{
      {"mlp", ModelFamily::kMlp, "adam", false, mlp_knobs(), &make_mlp, &small_mlp},
      {"sleep", ModelFamily::kSleep, "adam", false, sleep_knobs(), &make_sleep, &small_sleep},
      {"amoebanet-d", ModelFamily::kAmoebaNet, "rmsprop", true, amoebanet_knobs(),
       &make_amoebanet_d, &small_amoebanet},
      {"amoebanet-b", ModelFamily::kAmoebaNet, "rmsprop", false, amoebanet_knobs(),
       &make_amoebanet_b, &small_amoebanet},
      {"transformer-l", ModelFamily::kTransformer, "adam", true, transformer_knobs(),
       &make_transformer, &small_transformer},
  };
  return entries;
}

const Knob* ModelEntry::knob(const std::string& name) const {
  for (const auto& k : knobs) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string models_reading(const std::string& knob) {
  std::string out;
  for (const auto& entry : model_entries()) {
    if (entry.knob(knob) != nullptr) out += (out.empty() ? "" : ", ") + entry.name;
  }
  return out;
}

const std::vector<std::string>& model_knob_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : model_entries()) {
      for (const auto& k : entry.knobs) {
        if (std::find(out.begin(), out.end(), k.name) == out.end()) out.push_back(k.name);
      }
    }
    return out;
  }();
  return names;
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

ModelConfig::ModelConfig(const std::string& name)
    : name_(name), options_(model_entry(name).small_options()) {}

void ModelConfig::set_name(const std::string& name) {
  const auto& entry = model_entry(name);
  if (entry.family != model_entry(name_).family) options_ = entry.small_options();
  name_ = name;
}

void ModelConfig::throw_other_family() const {
  static const char* const kOptions[] = {"MlpOptions", "SleepOptions", "AmoebaNetOptions",
                                         "TransformerOptions"};
  static_assert(std::size(kOptions) == std::variant_size_v<ModelOptions>);
  throw ConfigError(c10::str("the model ", name_, " is configured by ", kOptions[options_.index()],
                             ", not by the options of another family asked for here"));
}

std::unique_ptr<ModelBuilder> make_model(const ModelConfig& c) {
  return model_entry(c.name()).make(c);
}

SampleBatch sample_batch(const ModelConfig& config, int64_t batch_size, uint64_t seed) {
  return make_model(config)->sample_batch(batch_size, seed);
}

std::string knob_flag(const std::string& knob) {
  std::string out = "--" + knob;
  std::replace(out.begin() + 2, out.end(), '_', '-');
  return out;
}

std::string Knob::flag() const {
  return knob_flag(name);
}

int64_t int_knob(const ModelConfig& config, const std::string& knob) {
  const auto value = get_knob(config, knob);
  GPIPE_CHECK(std::holds_alternative<int64_t>(value), ConfigError, "the model knob '", knob,
              "' is not an integer");
  return std::get<int64_t>(value);
}

bool has_knob(const ModelConfig& config, const std::string& knob) {
  return model_entry(config.name()).knob(knob) != nullptr;
}

namespace {

const Knob& knob_of(const ModelConfig& config, const std::string& name) {
  if (const auto* knob = model_entry(config.name()).knob(name)) return *knob;
  const auto readers = models_reading(name);
  throw ConfigError(c10::str("the model ", config.name(), " has no knob '", name, "' (",
                             readers.empty() ? "no model has it" : "read by " + readers, ")"));
}

}  // namespace

void set_knob(ModelConfig& config, const std::string& name, const KnobValue& value) {
  knob_of(config, name).set(config, value);
}

KnobValue get_knob(const ModelConfig& config, const std::string& name) {
  return knob_of(config, name).get(config);
}

nlohmann::json to_json(const ModelConfig& config) {
  nlohmann::json out{{"name", config.name()}};
  for (const auto& knob : model_entry(config.name()).knobs)
    std::visit([&](auto value) { out[knob.name] = value; }, knob.get(config));
  return out;
}

ModelConfig model_config_from_json(const nlohmann::json& json) {
  GPIPE_CHECK(json.is_object() && json.contains("name") && json["name"].is_string(), ConfigError,
              "a model's JSON needs a \"name\", got ", json.dump());
  ModelConfig config(json["name"].get<std::string>());
  for (const auto& [key, value] : json.items()) {
    if (key == "name") continue;
    if (value.is_boolean()) {
      set_knob(config, key, value.get<bool>());
    } else if (value.is_number_integer()) {
      set_knob(config, key, value.get<int64_t>());
    } else if (value.is_number()) {
      set_knob(config, key, value.get<double>());
    } else {
      throw ConfigError(
          c10::str("the model knob '", key, "' must be a number or a switch, got ", value.dump()));
    }
  }
  return config;
}

}  // namespace gpipe::models
