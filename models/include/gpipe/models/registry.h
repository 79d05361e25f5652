// One configuration struct and one factory for every model, for command-line tools.
//
// Why this file exists: gpipe_train, model_info and the experiment drivers take a model by name
// and a handful of flags. ModelConfig holds every knob of every model (each model reads the ones
// it has), the registry's entry says what a tool needs to know about the model (family, default
// optimizer, knobs) so no tool compares names, make_model turns a config into a ModelBuilder, and
// sample_batch makes the synthetic batch a trainer runs on synthetic data and the profiler
// measures balance-by-time/memory with.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "gpipe/models/model.h"

namespace gpipe::models {

// Field defaults are a small configuration that trains on a CPU in seconds; the paper's
// configurations set layers/filters (AmoebaNet) or layers/d_model/ffn/heads/vocab/seq_len
// (Transformer-L) explicitly (see results/model_info/commands.sh).
struct ModelConfig {
  // mlp | sleep | amoebanet-d | amoebanet-b | transformer-l
  std::string name = "amoebanet-d";
  // AmoebaNet: L normal cells. Transformer-L: decoder layers. MLP: hidden layers. Sleep: layers.
  int64_t layers = 3;
  // AmoebaNet: D, a multiple of 16.
  int64_t filters = 16;
  // AmoebaNet and MLP output classes.
  int64_t classes = 10;
  // AmoebaNet input: square images of image_size with `channels` channels (1 for Fashion-MNIST,
  // 3 for ImageNet and CIFAR).
  int64_t image_size = 32;
  int64_t channels = 3;
  // AmoebaNet stem convolution stride: 2 (ImageNet) or 1 (keeps small images' resolution).
  int64_t stem_stride = 2;
  // Transformer-L.
  int64_t d_model = 64;
  int64_t ffn = 256;
  int64_t heads = 4;
  int64_t vocab = 256;
  int64_t seq_len = 32;
  // Dropout (AmoebaNet: before the classifier; Transformer-L and MLP: everywhere they have it).
  double dropout = 0.0;
  // AmoebaNet drop-path.
  double drop_path = 0.0;
  // MLP hidden width and input features (also the sleep model's feature width).
  int64_t width = 64;
  int64_t in_features = 32;
  // MLP: BatchNorm after each hidden Linear.
  bool batch_norm = false;
  // Sleep model: forward milliseconds of each layer.
  double layer_ms = 1.0;
  // Layer i is initialised from (init_seed, i).
  uint64_t init_seed = 0;
};

// One field of ModelConfig as the tools see it: its JSON name (its flag is that name with '-' for
// '_'), what it means and where it lives. model_knobs() lists every field, so the flags
// (model_flags.h), to_json and ModelEntry::knobs are all made from one table.
struct Knob {
  std::string name;
  std::string help;
  std::variant<int64_t ModelConfig::*, double ModelConfig::*, bool ModelConfig::*> field;

  // "--d-model" for "d_model".
  std::string flag() const;
};

// Every knob, in ModelConfig order (init_seed is not one: it is the run's seed).
const std::vector<Knob>& model_knobs();

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
  // The knobs the model reads, by name: the model's own flags and JSON.
  std::vector<std::string> knobs;
  std::unique_ptr<ModelBuilder> (*make)(const ModelConfig&) = nullptr;
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

// Every knob, for manifests, summaries and cache keys (init_seed left out: it is the run's seed).
nlohmann::json to_json(const ModelConfig& config);
// The name and only the knobs the model reads (ModelEntry::knobs), for reports.
nlohmann::json knobs_json(const ModelConfig& config);

// A small configuration of `name` (the struct defaults with that name) for tests and CPU presets.
ModelConfig small_config(const std::string& name);

}  // namespace gpipe::models
