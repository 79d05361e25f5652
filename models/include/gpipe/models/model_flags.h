// The model flags every tool takes: --model and one flag per knob of the registry.
//
// Why this file exists: gpipe_train, gpipe_plan, accuracy_table and model_info all take a model
// on the command line. Declaring the flags in each tool let them drift (model_info lacked
// --batch-norm, which changes the parameter count). Here the flags come from the families' knob
// tables, each flag's help names the models that read it, and a tool can tell the user which of
// the flags given the chosen model ignores.
#pragma once

#include <string>
#include <vector>

#include "gpipe/models/registry.h"

namespace CLI {
class App;
}  // namespace CLI

namespace gpipe::models {

// Adds --model (one of model_names()) and one flag per knob name of any family
// (model_knob_names()) to `app`, in the help group `group`, writing into `config`: a knob sets
// config's family's option when the family has it, in whatever order the flags come. Each flag's
// help gives each family's meaning of it and the models reading it, and shows its default.
void add_model_flags(CLI::App& app, ModelConfig& config, const std::string& group = "Model");

// The knobs whose flags were given (on the command line or in a config file) but that
// config's family does not have, e.g. filters for an mlp.
std::vector<std::string> ignored_model_flags(const CLI::App& app, const ModelConfig& config);

// Logs a warning for each of ignored_model_flags(app, config), naming the models that read it.
void warn_ignored_model_flags(const CLI::App& app, const ModelConfig& config);

}  // namespace gpipe::models
