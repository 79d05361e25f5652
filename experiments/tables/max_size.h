// GPipe's Table 1 with this engine: the largest AmoebaNet-D (L, D) and Transformer-L that a
// naive-1 or pipeline-K configuration trains within a per-device memory budget.
//
// Why this file exists: it is the body of the max_model_size driver, kept out of main() so that
// presets, validation and the report are unit-tested. For each model and configuration it runs
// the calibrated search of size_search.h over the model's sizes, predicting peaks with the
// replay of costs/memory.h and confirming with real training steps whose per-device peaks the
// memory meter measures (parameters, gradients, optimizer state and activations, the optimizer
// update included). naive-1 is one device without re-materialisation or micro-batches; pipeline-K
// is K devices, M micro-batches and re-materialisation, partitioned by memory.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "gpipe/models/registry.h"
#include "gpipe/precision.h"
#include "gpipe/stage.h"
#include "tables/paper_figures.h"

namespace gpipe::tables {

// One column of Table 1: "naive-1" or "pipeline-K".
struct SizeConfig {
  std::string name;
  int64_t partitions = 1;
  bool pipelined = false;
};
// Throws ConfigError unless `name` is naive-1 or pipeline-K with K >= 1.
SizeConfig parse_size_config(const std::string& name);

struct MaxSizeModel {
  // Non-size knobs (classes, image size, d_model, ...); the search sets layers and filters.
  models::ModelConfig base;
  int64_t batch = 1;  // N
  // AmoebaNet-D: every L of `layers` with every D of `filters` (ascending). Transformer-L: every
  // L of `layers` (ascending); `filters` unused.
  std::vector<int64_t> layers;
  std::vector<int64_t> filters;
  // Table 1's protocol for AmoebaNet-D: configurations with fewer than `grow_depth_from`
  // partitions (naive-1, pipeline-1, pipeline-2) keep L = fixed_layers and grow D only, as the
  // paper's (18, 208), (18, 416), (18, 544); from pipeline-4 on every L of `layers` is searched.
  // 0: every configuration searches every L.
  int64_t fixed_layers = 0;
  int64_t grow_depth_from = 4;
  // Bytes per device for this model; 0: MaxSizeOptions::budget_bytes (the paper gives
  // Transformer-L 16 GB TPU v3 cores and AmoebaNet-D 8 GB accelerators).
  int64_t budget_bytes = 0;
};

struct MaxSizeOptions {
  std::string preset;
  int64_t budget_bytes = int64_t{8} << 30;
  std::vector<std::string> configs = {"naive-1", "pipeline-1", "pipeline-2", "pipeline-4",
                                      "pipeline-8"};
  std::vector<MaxSizeModel> models;
  int64_t chunks = 8;                           // M of the pipeline-K configurations
  Checkpoint checkpoint = Checkpoint::kAlways;  // of the pipeline-K configurations
  // RMSProp for every row, as the paper's Table 1 (12 bytes a parameter with the gradient).
  std::string optimizer = "rmsprop";
  int max_measurements = 6;  // measured steps per (model, configuration)
  int threads = 0;           // intra-op threads of profiles and one-device steps; 0: all
  // Every (model, configuration) is searched in each precision: fp32 and bf16 rows side by side.
  std::vector<Precision> precisions = {Precision::kFp32};

  // The budget of `model`: its own, or budget_bytes.
  int64_t budget_for(const MaxSizeModel& model) const;
};

// "quick": scaled-down images and dimensions and a budget that fit this 2-core, 24 GiB machine
// in minutes (AmoebaNet's fixed depth L=6, the deepest at which naive-1 still grows D); "paper":
// the paper's 8 GiB budget, 224x224 images, mini-batch 128 and fixed L=18 (AmoebaNet) and 16 GiB,
// d_model 2048, seq 1024, batch 32 (Transformer) - needs 8 x 16 GiB of memory. Throws ConfigError
// for another name.
MaxSizeOptions max_size_preset(const std::string& name);

// The model sizes of `model` that `config` can run (at least K layers), as ModelConfigs in search
// order: families (AmoebaNet: one per L; Transformer: one) of ascending members. Throws
// ConfigError when no size has K layers.
std::vector<std::vector<models::ModelConfig>> size_families(const MaxSizeModel& model,
                                                            const SizeConfig& config);

// "(L, D)" for AmoebaNet, "L" for Transformer-L.
std::string size_label(const models::ModelConfig& config);

// Throws ConfigError naming the value: unknown configuration, M not dividing N, a budget that
// K devices of this machine's memory cannot hold, no sizes, K larger than every size's layers.
void validate(const MaxSizeOptions& options, int64_t machine_bytes);

struct MaxSizeStep {
  std::string size;
  int64_t parameters = 0;
  double predicted_bytes = 0;
  double scale = 1;
  double measured_bytes = 0;
  bool fits = false;
};

struct MaxSizeRow {
  std::string model;
  std::string config;
  Precision precision = Precision::kFp32;
  int64_t partitions = 1;
  int64_t chunks = 1;
  std::string checkpoint;
  int64_t budget_bytes = 0;
  models::ModelConfig chosen;
  std::string size;
  int64_t parameters = 0;
  int64_t parameter_bytes = 0;  // float32 parameters alone
  // Parameters, gradients and optimizer state per parameter (12 for RMSProp), and that times
  // the parameters: the paper's "parameter memory" column.
  int64_t bytes_per_parameter = 0;
  std::vector<int64_t> balance;
  // Measured in the confirming step, per device: the peak of the whole training step, the bytes
  // held when it began (parameters, gradients, optimizer state) and the activation peak.
  std::vector<int64_t> peak_bytes_per_device;
  std::vector<int64_t> state_bytes_per_device;
  std::vector<int64_t> peak_activation_bytes_per_device;
  std::vector<double> predicted_bytes_per_device;  // costs/memory.h's replay, unscaled
  double scale = 1;                                // measured / predicted, last search step
  std::vector<MaxSizeStep> search;
  std::optional<PaperMaxModel> paper;

  int64_t state_bytes() const;            // summed over devices
  int64_t peak_activation_bytes() const;  // summed over devices, as the paper's Table 1
  int64_t max_peak_bytes() const;
};

struct MaxSizeResult {
  MaxSizeOptions options;
  std::vector<MaxSizeRow> rows;
  nlohmann::json machine;
  double seconds = 0;
  std::string command;
};

// Searches every (model, configuration), logging progress. Throws ConfigError when the budget is
// too small for even the smallest size of a model in a configuration, naming both.
MaxSizeResult run_max_size(const MaxSizeOptions& options);

// Parameters of the row with `config` divided by those of the row with `base` for `model`, both
// in `precision`.
std::optional<double> parameter_ratio(const MaxSizeResult& result, const std::string& model,
                                      const std::string& config, const std::string& base,
                                      Precision precision = Precision::kFp32);

nlohmann::json to_json(const MaxSizeResult& result);
std::string to_markdown(const MaxSizeResult& result);
std::string to_csv(const MaxSizeResult& result);

}  // namespace gpipe::tables
