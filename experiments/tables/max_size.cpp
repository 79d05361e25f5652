#include "tables/max_size.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "common/report.h"
#include "costs/measured_step.h"
#include "costs/memory.h"
#include "gpipe/errors.h"
#include "tables/paper_figures.h"
#include "tables/size_search.h"
#include "tables/workload.h"

namespace gpipe::tables {
namespace {

std::vector<int64_t> range(int64_t first, int64_t last, int64_t step) {
  std::vector<int64_t> values;
  for (int64_t v = first; v <= last; v += step)
    values.push_back(v);
  return values;
}

std::string config_key(const models::ModelConfig& c) {
  return models::to_json(c).dump();
}

double elapsed_s(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t max_of(const std::vector<int64_t>& values) {
  return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
}

int64_t sum_of(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (int64_t v : values)
    total += v;
  return total;
}

}  // namespace

SizeConfig parse_size_config(const std::string& name) {
  const auto dash = name.rfind('-');
  SizeConfig config;
  config.name = name;
  if (dash != std::string::npos) {
    const std::string kind = name.substr(0, dash);
    const std::string number = name.substr(dash + 1);
    const bool digits = !number.empty() && number.size() < 6 &&
                        std::all_of(number.begin(), number.end(), ::isdigit);
    if (digits && (kind == "naive" || kind == "pipeline")) {
      config.partitions = std::stoll(number);
      config.pipelined = kind == "pipeline";
      GPIPE_CHECK(config.partitions >= 1, ConfigError, "configuration '", name,
                  "': K must be >= 1");
      GPIPE_CHECK(config.pipelined || config.partitions == 1, ConfigError, "configuration '", name,
                  "': naive means one device without GPipe; only naive-1 exists (Table 1)");
      return config;
    }
  }
  throw ConfigError(c10::str("unknown configuration '", name,
                             "': expected naive-1 or pipeline-K (K partitions), e.g. pipeline-8"));
}

MaxSizeOptions max_size_preset(const std::string& name) {
  MaxSizeOptions options;
  options.preset = name;
  MaxSizeModel amoeba;
  amoeba.base = models::ModelConfig("amoebanet-d");
  MaxSizeModel lm;
  lm.base = models::ModelConfig("transformer-l");
  if (name == "quick") {
    options.budget_bytes = int64_t{96} << 20;
    options.chunks = 8;
    amoeba.base.amoebanet().image_size(64).classes(10).channels(3);
    amoeba.batch = 32;
    amoeba.layers = {3, 6, 12, 18, 24, 36};
    amoeba.filters = range(16, 512, 16);
    amoeba.fixed_layers = 6;
    lm.base.transformer().d_model(256).ffn(1024).heads(4).vocab(2048).seq_len(64);
    lm.batch = 16;
    lm.layers = range(1, 160, 1);
  } else if (name == "paper") {
    options.budget_bytes = int64_t{8} << 30;
    options.chunks = 8;
    amoeba.base.amoebanet().image_size(224).classes(1000).channels(3);
    amoeba.batch = 128;
    amoeba.layers = {6, 12, 18, 24, 36, 48, 72, 96};
    amoeba.filters = range(16, 1024, 16);
    amoeba.fixed_layers = 18;
    lm.budget_bytes = int64_t{16} << 30;
    lm.base.transformer().d_model(2048).ffn(8192).heads(32).vocab(32000).seq_len(1024);
    lm.batch = 32;
    lm.layers = range(1, 512, 1);
  } else {
    throw ConfigError(c10::str("unknown preset '", name, "': expected quick or paper"));
  }
  options.models = {amoeba, lm};
  return options;
}

std::vector<std::vector<models::ModelConfig>> size_families(const MaxSizeModel& model,
                                                            const SizeConfig& config) {
  std::vector<std::vector<models::ModelConfig>> families;
  check_paper_model("max_model_size", model.base.name());
  const bool amoeba = is_amoebanet(model.base.name());
  int64_t most_layers = 0;
  auto layers_of = [](const models::ModelConfig& c) { return models::make_model(c)->num_layers(); };
  if (amoeba) {
    auto depths = model.layers;
    if (model.fixed_layers > 0 && config.partitions < model.grow_depth_from) {
      depths = {model.fixed_layers};
    }
    for (int64_t L : depths) {
      std::vector<models::ModelConfig> family;
      for (int64_t D : model.filters) {
        auto c = model.base;
        c.amoebanet().layers(L).filters(D);
        family.push_back(c);
      }
      if (family.empty()) continue;
      const int64_t n = layers_of(family.front());
      most_layers = std::max(most_layers, n);
      if (n >= config.partitions) families.push_back(family);
    }
  } else {
    std::vector<models::ModelConfig> family;
    for (int64_t L : model.layers) {
      auto c = model.base;
      c.transformer().layers(L);
      const int64_t n = layers_of(c);
      most_layers = std::max(most_layers, n);
      if (n >= config.partitions) family.push_back(c);
    }
    if (!family.empty()) families.push_back(family);
  }
  GPIPE_CHECK(!families.empty(), ConfigError, config.name, " needs a model of at least ",
              config.partitions, " layers (one per device), but the deepest ", model.base.name(),
              " of this search has ", most_layers, " layers; search larger L (--",
              amoeba ? "amoebanet-layers" : "transformer-layers", ") or use fewer partitions");
  return families;
}

std::string size_label(const models::ModelConfig& config) {
  if (is_amoebanet(config.name())) {
    return c10::str("(", config.amoebanet().layers(), ", ", config.amoebanet().filters(), ")");
  }
  return std::to_string(config.transformer().layers());
}

int64_t MaxSizeOptions::budget_for(const MaxSizeModel& model) const {
  return model.budget_bytes > 0 ? model.budget_bytes : budget_bytes;
}

void validate(const MaxSizeOptions& options, int64_t machine_bytes) {
  GPIPE_CHECK(options.budget_bytes > 0, ConfigError, "--memory-budget must be > 0");
  GPIPE_CHECK(!options.configs.empty(), ConfigError, "no configurations to search");
  GPIPE_CHECK(!options.models.empty(), ConfigError, "no models to search");
  GPIPE_CHECK(options.chunks >= 1, ConfigError, "--chunks must be >= 1, got ", options.chunks);
  GPIPE_CHECK(options.max_measurements >= 1, ConfigError, "--max-measurements must be >= 1, got ",
              options.max_measurements);
  GPIPE_CHECK(options.threads >= 0, ConfigError, "--threads must be >= 0, got ", options.threads);
  int64_t most_devices = 1;
  for (const auto& name : options.configs) {
    most_devices = std::max(most_devices, parse_size_config(name).partitions);
  }
  for (const auto& model : options.models) {
    GPIPE_CHECK(model.batch >= 1, ConfigError, model.base.name(), ": the mini-batch must be >= 1");
    GPIPE_CHECK(model.batch % options.chunks == 0, ConfigError, "--chunks ", options.chunks,
                " must divide the mini-batch N=", model.batch, " of ", model.base.name());
    GPIPE_CHECK(!model.layers.empty(), ConfigError, model.base.name(), ": no L to search");
    GPIPE_CHECK(!is_amoebanet(model.base.name()) || !model.filters.empty(), ConfigError,
                model.base.name(), ": no D to search");
    GPIPE_CHECK(model.fixed_layers >= 0, ConfigError, "--amoebanet-fixed-layers must be >= 0, got ",
                model.fixed_layers);
    for (const auto& name : options.configs)
      size_families(model, parse_size_config(name));
  }
  int64_t largest_budget = options.budget_bytes;
  for (const auto& model : options.models)
    largest_budget = std::max(largest_budget, options.budget_for(model));
  if (machine_bytes > 0) {
    const double needed = static_cast<double>(largest_budget) * most_devices;
    GPIPE_CHECK(needed <= 0.8 * static_cast<double>(machine_bytes), ConfigError, "--memory-budget ",
                format_bytes(static_cast<double>(largest_budget)), " on each of ", most_devices,
                " devices needs ", format_bytes(needed), ", more than this machine's ",
                format_bytes(static_cast<double>(machine_bytes)),
                " can hold (80%); lower the budget or drop the largest configurations");
  }
}

int64_t MaxSizeRow::state_bytes() const {
  return sum_of(state_bytes_per_device);
}
int64_t MaxSizeRow::peak_activation_bytes() const {
  return sum_of(peak_activation_bytes_per_device);
}
int64_t MaxSizeRow::max_peak_bytes() const {
  return max_of(peak_bytes_per_device);
}

namespace {

// What the searches of one run share across configurations: parameter counts and layer costs
// (measured at the pipelined micro-batch N/M), by model configuration.
struct SizeCaches {
  std::map<std::string, int64_t> parameters;
  std::map<std::string, costs::LayerCosts> profiles;
};

// The search for the largest member of one model's families under one configuration (naive-1,
// pipeline-K): predictions by the replay of costs/memory.h over each size's layer costs, real
// training steps to measure, and the row the largest fit becomes.
class ConfigSearch {
 public:
  ConfigSearch(const MaxSizeOptions& options, const MaxSizeModel& model, const std::string& name,
               Precision precision, int threads, SizeCaches& caches)
      : options_(options),
        precision_(precision),
        model_(model),
        name_(name),
        config_(parse_size_config(name)),
        K_(config_.partitions),
        families_(size_families(model, config_)),
        budget_(static_cast<double>(options.budget_for(model))),
        optimizer_(resolve_optimizer(options.optimizer, model.base.name())),
        micro_(model.batch / options.chunks),
        threads_(threads),
        caches_(caches),
        chunks_(config_.pipelined ? options.chunks : 1),
        schedule_(make_schedule(ScheduleKind::kGPipe, K_, chunks_)),
        state_slots_(optimizer_state_slots(optimizer_)) {}

  // Searches and returns the row of the largest size that fits; throws ConfigError when none does.
  MaxSizeRow run(std::chrono::steady_clock::time_point started) {
    SearchCallbacks callbacks;
    size_t sizes = 0;
    for (const auto& f : families_) {
      callbacks.family_sizes.push_back(f.size());
      sizes += f.size();
    }
    callbacks.parameters = [this](const SearchPoint& p) {
      return static_cast<double>(parameters(config_at(p)));
    };
    callbacks.predicted_bytes = [this](const SearchPoint& p) { return predicted_bytes(p); };
    callbacks.measured_bytes = [this](const SearchPoint& p) { return measured_bytes(p); };
    spdlog::info("{} {} in {}: searching {} sizes within {} per device", model_.base.name(), name_,
                 to_string(precision_), sizes, format_bytes(budget_));
    const auto outcome = search_largest(callbacks, budget_, options_.max_measurements);
    if (!outcome.best) {
      std::ostringstream tried;
      for (const auto& s : outcome.steps) {
        tried << " " << size_label(config_at(s.point)) << " peaked at "
              << format_bytes(s.measured_bytes) << ";";
      }
      throw ConfigError(c10::str("--memory-budget ", format_bytes(budget_),
                                 " is too small for any ", model_.base.name(), " in ", name_,
                                 ": the smallest sizes measured do not fit (", tried.str(),
                                 " ). Raise --memory-budget or search smaller sizes"));
    }
    auto row = make_row(outcome);
    spdlog::info("{} {}: largest {} with {} parameters ({:.1f} s so far)", row.model, name_,
                 row.size, format_count(static_cast<double>(row.parameters)), elapsed_s(started));
    return row;
  }

 private:
  const models::ModelConfig& config_at(const SearchPoint& p) const {
    return families_.at(p.family).at(p.member);
  }

  int64_t parameters(const models::ModelConfig& c) {
    const auto key = config_key(c);
    auto it = caches_.parameters.find(key);
    if (it == caches_.parameters.end()) {
      it = caches_.parameters.emplace(key, models::make_model(c)->count_parameters()).first;
    }
    return it->second;
  }

  // The layer costs of `c` at the run's micro-batch: measured once per size at the pipelined
  // micro-batch N/M, and scaled to N for naive-1 (one micro-batch of the whole batch).
  costs::LayerCosts run_costs(const models::ModelConfig& c) {
    const auto key = config_key(c) + "/" + to_string(precision_);
    auto it = caches_.profiles.find(key);
    if (it == caches_.profiles.end()) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto builder = models::make_model(c);
      auto p = costs::measure_layer_costs(
          builder->build(), builder->sample_batch(micro_, 2), builder->loss(),
          DeviceSpec::parse("cpu:0"), make_optimizer(optimizer_),
          ProfileOptions().warmup(0).iterations(1).threads(threads_).precision(precision_));
      spdlog::debug("{} {}: layer costs at micro-batch {} in {:.1f} s", c.name(), size_label(c),
                    micro_, elapsed_s(t0));
      it = caches_.profiles.emplace(key, std::move(p)).first;
    }
    const double run_micro = static_cast<double>(model_.batch / chunks_);
    return costs::scaled_bytes(it->second, run_micro / static_cast<double>(micro_));
  }

  std::vector<int64_t> balance_of(const costs::LayerCosts& costs) const {
    if (K_ == 1) return {costs.num_layers()};
    return costs::balance_by_memory(costs, K_, state_slots_,
                                    costs::kept_microbatches(schedule_, checkpoint()));
  }

  std::vector<double> predicted_stage_bytes(const costs::LayerCosts& costs,
                                            const std::vector<int64_t>& balance) const {
    return costs::predict_peak_bytes(costs, schedule_, balance, checkpoint(), state_slots_);
  }

  double predicted_bytes(const SearchPoint& p) {
    const auto& c = config_at(p);
    // Sizes whose state alone, perfectly spread, is far over budget need no profile.
    const double state = static_cast<double>(parameters(c) * bytes_per_parameter(optimizer_)) /
                         static_cast<double>(K_);
    if (state > 2 * budget_) return state;
    const auto costs = run_costs(c);
    const auto stages = predicted_stage_bytes(costs, balance_of(costs));
    return *std::max_element(stages.begin(), stages.end());
  }

  // One real training step of the size on K CPU devices: its largest per-device peak.
  double measured_bytes(const SearchPoint& p) {
    const auto& c = config_at(p);
    const auto t0 = std::chrono::steady_clock::now();
    const auto builder = models::make_model(c);
    PipelineShape run;
    run.balance = Balance::per_device(balance_of(run_costs(c)));
    for (int64_t s = 0; s < K_; ++s)
      run.devices.push_back(c10::str("cpu:", s));
    run.M = chunks_;
    run.checkpoint = checkpoint();
    run.threads = K_ == 1 ? threads_ : 1;
    run.precision = precision_;
    auto m = costs::measure_training(*builder, builder->sample_batch(model_.batch, 1), run,
                                     make_optimizer(optimizer_),
                                     /*warmup=*/1, /*steps=*/1);
    const double peak = static_cast<double>(max_of(m.peak_bytes));
    spdlog::info(
        "{} {} {}: {} parameters, balance {}, peak {} per device ({} budget), "
        "step in {:.1f} s",
        c.name(), name_, size_label(c), format_count(parameters(c)),
        c10::Join(",", run.balance.layers), format_bytes(peak),
        peak <= budget_ ? "fits the" : "over the", elapsed_s(t0));
    measured_[{p.family, p.member}] = std::move(m);
    return peak;
  }

  Checkpoint checkpoint() const {
    return config_.pipelined ? options_.checkpoint : Checkpoint::kNever;
  }

  MaxSizeRow make_row(const SearchOutcome& outcome) {
    const auto& best = *outcome.best;
    const auto& chosen = config_at(best);
    const auto& m = measured_.at({best.family, best.member});
    MaxSizeRow row;
    row.model = model_.base.name();
    row.config = name_;
    row.precision = precision_;
    row.partitions = K_;
    row.chunks = chunks_;
    row.checkpoint = to_string(checkpoint());
    row.budget_bytes = options_.budget_for(model_);
    row.chosen = chosen;
    row.size = size_label(chosen);
    row.parameters = parameters(chosen);
    row.parameter_bytes = row.parameters * 4;
    row.bytes_per_parameter = bytes_per_parameter(optimizer_);
    const auto costs = run_costs(chosen);
    row.balance = balance_of(costs);
    row.peak_bytes_per_device = m.peak_bytes;
    row.state_bytes_per_device = m.state_bytes;
    row.peak_activation_bytes_per_device = m.peak_activation_bytes;
    row.predicted_bytes_per_device = predicted_stage_bytes(costs, row.balance);
    row.scale = outcome.scale;
    for (const auto& s : outcome.steps) {
      row.search.push_back({size_label(config_at(s.point)), static_cast<int64_t>(s.parameters),
                            s.predicted_bytes, s.scale, s.measured_bytes, s.fits});
    }
    row.paper = paper_table1_entry(row.model, row.config);
    return row;
  }

  const MaxSizeOptions& options_;
  const Precision precision_;
  const MaxSizeModel& model_;
  const std::string name_;
  const SizeConfig config_;
  const int64_t K_;
  const std::vector<std::vector<models::ModelConfig>> families_;
  const double budget_;
  const std::string optimizer_;
  const int64_t micro_;
  const int threads_;
  SizeCaches& caches_;
  const int64_t chunks_;     // M of the run: 1 for naive-1
  const Schedule schedule_;  // GPipe's, K x M
  const int64_t state_slots_;
  std::map<std::pair<size_t, size_t>, costs::TrainingMeasurement> measured_;
};

}  // namespace

MaxSizeResult run_max_size(const MaxSizeOptions& options) {
  const int64_t machine = physical_memory_bytes();
  validate(options, machine);
  const auto started = std::chrono::steady_clock::now();
  MaxSizeResult result;
  result.options = options;
  result.machine = {{"hardware_threads", hardware_threads()},
                    {"physical_memory_bytes", machine},
                    {"load_average_before", load_average()},
                    {"environment", arithmetic_environment()}};
  const int threads = options.threads > 0 ? options.threads : hardware_threads();
  SizeCaches caches;
  for (const auto precision : options.precisions) {
    for (const auto& model : options.models) {
      for (const auto& name : options.configs) {
        result.rows.push_back(
            ConfigSearch(options, model, name, precision, threads, caches).run(started));
      }
    }
  }
  result.machine["load_average_after"] = load_average();
  result.seconds = elapsed_s(started);
  return result;
}

std::optional<double> parameter_ratio(const MaxSizeResult& result, const std::string& model,
                                      const std::string& config, const std::string& base,
                                      Precision precision) {
  std::optional<double> top, bottom;
  for (const auto& row : result.rows) {
    if (row.model != model || row.precision != precision) continue;
    if (row.config == config) top = static_cast<double>(row.parameters);
    if (row.config == base) bottom = static_cast<double>(row.parameters);
  }
  if (!top || !bottom || *bottom <= 0) return std::nullopt;
  return *top / *bottom;
}

}  // namespace gpipe::tables
