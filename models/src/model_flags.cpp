// add_model_flags: the registry's knob table as CLI11 options.
#include "gpipe/models/model_flags.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>

namespace gpipe::models {

namespace {

bool reads(const ModelEntry& entry, const std::string& knob) {
  return std::find(entry.knobs.begin(), entry.knobs.end(), knob) != entry.knobs.end();
}

}  // namespace

std::string models_reading(const std::string& knob) {
  std::string out;
  for (const auto& entry : model_entries()) {
    if (reads(entry, knob)) out += (out.empty() ? "" : ", ") + entry.name;
  }
  return out;
}

void add_model_flags(CLI::App& app, ModelConfig& config, const std::string& group) {
  app.add_option("--model", config.name, "the model; each flag below names the models reading it")
      ->check(CLI::IsMember(model_names()))
      ->capture_default_str()
      ->group(group);
  for (const auto& knob : model_knobs()) {
    const auto help = knob.help + " [" + models_reading(knob.name) + "]";
    std::visit(
        [&](auto field) {
          using T = std::decay_t<decltype(config.*field)>;
          if constexpr (std::is_same_v<T, bool>) {
            app.add_flag(knob.flag(), config.*field, help)->group(group);
          } else {
            app.add_option(knob.flag(), config.*field, help)->capture_default_str()->group(group);
          }
        },
        knob.field);
  }
}

std::vector<const Knob*> ignored_model_flags(const CLI::App& app, const ModelConfig& config) {
  const auto& entry = model_entry(config.name);
  std::vector<const Knob*> out;
  for (const auto& knob : model_knobs()) {
    if (app.count(knob.flag()) > 0 && !reads(entry, knob.name)) out.push_back(&knob);
  }
  return out;
}

void warn_ignored_model_flags(const CLI::App& app, const ModelConfig& config) {
  for (const auto* knob : ignored_model_flags(app, config)) {
    spdlog::warn("{} is ignored: {} does not read it (read by {})", knob->flag(), config.name,
                 models_reading(knob->name));
  }
}

}  // namespace gpipe::models
