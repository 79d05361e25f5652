// add_model_flags: every family's knob table as CLI11 options.
#include "gpipe/models/model_flags.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <map>
#include <memory>

#include "gpipe/errors.h"
#include "gpipe/exit_codes.h"

namespace gpipe::models {

namespace {

// The first entry (in registry order) whose family has the knob.
const ModelEntry& first_reader(const std::string& knob) {
  for (const auto& entry : model_entries()) {
    if (entry.knob(knob) != nullptr) return entry;
  }
  throw ConfigError("no model has the knob '" + knob + "'");
}

// "normal cells L [amoebanet-d, amoebanet-b]; decoder layers [transformer-l]": each family's
// meaning of the knob, with the models that read it in that sense.
std::string knob_help(const std::string& knob) {
  std::vector<std::pair<std::string, std::string>> meanings;  // help, readers
  for (const auto& entry : model_entries()) {
    const auto* k = entry.knob(knob);
    if (k == nullptr) continue;
    auto same = std::find_if(meanings.begin(), meanings.end(),
                             [&](const auto& m) { return m.first == k->help; });
    if (same == meanings.end()) {
      meanings.emplace_back(k->help, entry.name);
    } else {
      same->second += ", " + entry.name;
    }
  }
  std::string out;
  for (const auto& [help, readers] : meanings)
    out += (out.empty() ? "" : "; ") + help + " [" + readers + "]";
  return out;
}

std::string value_string(const KnobValue& value) {
  return std::visit(
      [](auto v) -> std::string {
        if constexpr (std::is_same_v<decltype(v), bool>) {
          return v ? "true" : "false";
        } else {
          return c10::str(v);
        }
      },
      value);
}

// Each count or size knob's range (docs/design.md lists them). The paper's largest models lie
// well inside (AmoebaNet-B with L=18, D=512 at 480 pixels; Transformer-L with 128 layers of
// d_model 2048, FFN 8192, 32000 tokens); past the upper bounds no one machine could build the
// model, and the products the models compute (parameters, activation sizes) stay within int64.
struct Bound {
  double min, max;
};
const std::map<std::string, Bound>& knob_bounds() {
  static const std::map<std::string, Bound> bounds = {
      {"layers", {1, 4096}},     {"width", {1, 1 << 20}},   {"in_features", {1, 1 << 24}},
      {"classes", {1, 1 << 24}}, {"filters", {1, 1 << 16}}, {"image_size", {1, 1 << 14}},
      {"channels", {1, 4096}},   {"stem_stride", {1, 64}},  {"d_model", {1, 1 << 16}},
      {"ffn", {1, 1 << 18}},     {"heads", {1, 4096}},      {"vocab", {1, 1 << 24}},
      {"seq_len", {1, 1 << 20}}, {"dropout", {0, 1}},       {"drop_path", {0, 1}},
      {"layer_ms", {0, 3.6e6}}};
  return bounds;
}

}  // namespace

void add_model_flags(CLI::App& app, ModelConfig& config, const std::string& group) {
  // CLI11 runs the flags' callbacks after parsing, in no order this code relies on: a knob given
  // before the model is known is kept here and set again when --model changes the family.
  auto given = std::make_shared<std::map<std::string, KnobValue>>();
  app.add_option_function<std::string>(
         "--model",
         [&config, given](const std::string& name) {
           config.set_name(name);
           for (const auto& [knob, value] : *given) {
             if (has_knob(config, knob)) set_knob(config, knob, value);
           }
         },
         "the model; each flag below names the models reading it")
      ->check(CLI::IsMember(model_names()))
      ->default_str(config.name())
      ->group(group);
  for (const auto& name : model_knob_names()) {
    const auto& reader = first_reader(name);
    const auto fallback = reader.knob(name)->get(ModelConfig(reader.name));
    const auto shown = has_knob(config, name) ? get_knob(config, name) : fallback;
    auto apply = [&config, given, name](const KnobValue& value) {
      (*given)[name] = value;
      if (has_knob(config, name)) set_knob(config, name, value);
    };
    const auto flag = knob_flag(name);
    CLI::Option* option = nullptr;
    if (std::holds_alternative<bool>(fallback)) {
      option = app.add_flag_function(
          flag, [apply](std::int64_t count) { apply(count > 0); }, knob_help(name));
    } else if (std::holds_alternative<double>(fallback)) {
      option = app.add_option_function<double>(
          flag, [apply](double v) { apply(v); }, knob_help(name));
    } else {
      option = app.add_option_function<int64_t>(
          flag, [apply](int64_t v) { apply(v); }, knob_help(name));
    }
    option->default_str(value_string(shown))->group(group);
    if (const auto bound = knob_bounds().find(name); bound != knob_bounds().end()) {
      const auto [low, high] = bound->second;
      option->check(std::holds_alternative<int64_t>(fallback)
                        ? int_range(static_cast<int64_t>(low), static_cast<int64_t>(high))
                        : CLI::Range(low, high));
    }
  }
}

std::vector<std::string> ignored_model_flags(const CLI::App& app, const ModelConfig& config) {
  std::vector<std::string> out;
  for (const auto& name : model_knob_names()) {
    if (!has_knob(config, name) && app.count(knob_flag(name)) > 0) out.push_back(name);
  }
  return out;
}

void warn_ignored_model_flags(const CLI::App& app, const ModelConfig& config) {
  for (const auto& name : ignored_model_flags(app, config)) {
    spdlog::warn("{} is ignored: {} does not read it (read by {})", knob_flag(name), config.name(),
                 models_reading(name));
  }
}

}  // namespace gpipe::models
