// The optimisers the paper's recipes use, built from a few settings.
//
// Why this file exists: AmoebaNet trains with RMSProp, the Transformer with Adam, fine-tuning
// with SGD and Nesterov momentum. The trainer builds them from its flags and the table drivers
// from a name alone (their steps are timed and weighed, not trained far); both go through this
// one factory, so an optimiser's state, and so its memory, is the same wherever it is built.
#pragma once

#include <string>

#include "gpipe/pipeline.h"

namespace gpipe::cli {

struct OptimizerSettings {
  /* implicit */ OptimizerSettings(std::string name) : name_(std::move(name)) {}
  TORCH_ARG(std::string, name);  // sgd | rmsprop | adam | adamw
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, momentum) = 0.0;  // sgd and rmsprop
  TORCH_ARG(bool, nesterov) = false;  // sgd
  TORCH_ARG(double, weight_decay) = 0.0;
  TORCH_ARG(double, rmsprop_decay) = 0.9;  // alpha
  TORCH_ARG(double, rmsprop_eps) = 1e-8;
  TORCH_ARG(double, adam_beta1) = 0.9;
  TORCH_ARG(double, adam_beta2) = 0.999;
  TORCH_ARG(double, adam_eps) = 1e-8;
};

// One optimiser per stage, as `settings` say. Throws ConfigError naming the flag for an unknown
// optimiser or a setting out of range.
Pipeline::OptimizerFactory make_optimizer_factory(const OptimizerSettings& settings);

}  // namespace gpipe::cli
