// One configuration type and one factory for every model, for command-line tools.
//
// Why this file exists: gpipe_train, model_info and the experiment drivers take a model by name
// and a handful of flags. A ModelConfig is a model name with its family's own options type; the
// registry's entry says what a tool needs to know about the model (family, default optimizer, the
// family's knobs, from which its flags and JSON are made) so no tool compares names, make_model
// turns a config into a ModelBuilder, and sample_batch makes the synthetic batch a trainer runs
// on synthetic data and the profiler measures balance-by-time/memory with.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gpipe/models/amoebanet.h"
#include "gpipe/models/mlp.h"
#include "gpipe/models/model.h"
#include "gpipe/models/sleep.h"
#include "gpipe/models/transformer.h"

namespace gpipe::models {

// Each family's options type (AmoebaNetOptions, TransformerOptions, MlpOptions, SleepOptions) is
// the one its builder takes; a config holds the one of its model's family.
using ModelOptions = std::variant<MlpOptions, SleepOptions, AmoebaNetOptions, TransformerOptions>;

// A model by registry name with its family's options. ModelConfig("transformer-l") starts from
// the family's small configuration, one that trains on a CPU in seconds; the paper's
// configurations set layers/filters (AmoebaNet) or layers/d_model/ffn/heads/vocab/seq_len
// (Transformer-L) explicitly (see results/model_info/commands.sh).
class ModelConfig {
 public:
  // Throws ConfigError naming the known models for an unknown name.
  explicit ModelConfig(const std::string& name = "amoebanet-d");

  const std::string& name() const { return name_; }
  // Another model: keeps the options when it is of the same family (amoebanet-d to amoebanet-b),
  // else starts from the new family's small configuration.
  void set_name(const std::string& name);

  const ModelOptions& options() const { return options_; }
  // The family's options, e.g. as<TransformerOptions>(); throws ConfigError naming the model when
  // it is of another family.
  template <class Options>
  const Options& as() const {
    const auto* options = std::get_if<Options>(&options_);
    if (options == nullptr) throw_other_family();
    return *options;
  }
  template <class Options>
  Options& as() {
    return const_cast<Options&>(std::as_const(*this).as<Options>());
  }
  AmoebaNetOptions& amoebanet() { return as<AmoebaNetOptions>(); }
  TransformerOptions& transformer() { return as<TransformerOptions>(); }
  MlpOptions& mlp() { return as<MlpOptions>(); }
  SleepOptions& sleep() { return as<SleepOptions>(); }
  const AmoebaNetOptions& amoebanet() const { return as<AmoebaNetOptions>(); }
  const TransformerOptions& transformer() const { return as<TransformerOptions>(); }
  const MlpOptions& mlp() const { return as<MlpOptions>(); }
  const SleepOptions& sleep() const { return as<SleepOptions>(); }

  // Layer i is initialised from (init_seed, i); the run's seed, not a knob of the model.
  uint64_t init_seed = 0;

 private:
  [[noreturn]] void throw_other_family() const;

  std::string name_;
  ModelOptions options_;
};

// A knob's value: an integer, a real or a switch.
using KnobValue = std::variant<int64_t, double, bool>;

// One option of a family as the tools see it: its JSON name (its flag is that name with '-' for
// '_'), what it means for that family, and how to read and write it in a config of the family.
// Each registry entry lists its family's knobs, so a model's flags and JSON come from one table.
struct Knob {
  std::string name;
  std::string help;
  std::function<KnobValue(const ModelConfig&)> get;
  std::function<void(ModelConfig&, const KnobValue&)> set;

  std::string flag() const;
};

// The flag of a knob: "--d-model" for "d_model".
std::string knob_flag(const std::string& knob);

// The knob names of every family, each once, in registry order (for the flags).
const std::vector<std::string>& model_knob_names();
// The models whose family has a knob, e.g. "amoebanet-d, amoebanet-b" for "filters".
std::string models_reading(const std::string& knob);

// The kinds of model the tools treat differently: how a size is written ("(L, D)" for AmoebaNet,
// "L" otherwise), which knobs a size search varies, which of the paper's figures apply.
enum class ModelFamily { kMlp, kSleep, kAmoebaNet, kTransformer };

// What the tools know about a model, so that none of them compares model names.
struct ModelEntry {
  std::string name;
  ModelFamily family;
  // The optimizer of the paper's runs of the family (RMSProp for AmoebaNet, Adam for
  // Transformer-L; Adam for the CPU-only models), for drivers whose --optimizer is `auto`.
  std::string default_optimizer;
  // One of the two models of the paper's Tables 1-3 (AmoebaNet-D, Transformer-L).
  bool in_paper_tables = false;
  // The knobs of the family: the model's own flags and JSON.
  std::vector<Knob> knobs;
  std::unique_ptr<ModelBuilder> (*make)(const ModelConfig&) = nullptr;
  // The small configuration's options (ModelConfig(name)).
  ModelOptions (*small_options)() = nullptr;

  // Null when the family has no knob of that name.
  const Knob* knob(const std::string& name) const;
};

// Every model, in model_names() order.
const std::vector<ModelEntry>& model_entries();
// Throws ConfigError naming the known models for an unknown name.
const ModelEntry& model_entry(const std::string& name);
// Null for an unknown name.
const ModelEntry* find_model(const std::string& name);

// "mlp", "sleep", "amoebanet-d", "amoebanet-b", "transformer-l".
const std::vector<std::string>& model_names();

// Throws ConfigError for an unknown name or a knob the model cannot take, naming the value.
std::unique_ptr<ModelBuilder> make_model(const ModelConfig& config);

// make_model(config)->sample_batch(batch_size, seed).
SampleBatch sample_batch(const ModelConfig& config, int64_t batch_size, uint64_t seed);

// The name and the family's knobs, for manifests, summaries, reports and cache keys (init_seed
// left out: it is the run's seed).
nlohmann::json to_json(const ModelConfig& config);
// The inverse: a config of json["name"] with the knobs json holds (others keep the small config's
// values). Throws ConfigError for an unknown model, a knob the family does not have or a value
// of the wrong type, naming it.
ModelConfig model_config_from_json(const nlohmann::json& json);

// Sets a knob of config's family; throws ConfigError naming the model and the models that read
// the knob when its family has none of that name.
void set_knob(ModelConfig& config, const std::string& knob, const KnobValue& value);
// A knob of config's family; throws ConfigError as set_knob does.
KnobValue get_knob(const ModelConfig& config, const std::string& knob);
// get_knob of an integer knob ("layers" of any family, say).
int64_t int_knob(const ModelConfig& config, const std::string& knob);
// Whether config's family has the knob.
bool has_knob(const ModelConfig& config, const std::string& knob);

}  // namespace gpipe::models
