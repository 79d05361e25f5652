// The table drivers' workload: each model's optimizer, its bytes per parameter, this machine.
//
// Why this file exists: Tables 1-3 run real training steps of a real model (costs/measured_step.h)
// with an optimizer that keeps real state - RMSProp for AmoebaNet as the paper trains it, Adam for
// the Transformer - so that the memory per parameter is honest. The drivers name optimizers on
// the command line; this file turns a name into its state, its bytes and its factory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/models/registry.h"
#include "gpipe/pipeline.h"

namespace gpipe::tables {

// "rmsprop" for AmoebaNet (the paper's optimizer; 12 bytes per parameter with its gradient and
// one state slot), "adam" for everything else.
std::string default_optimizer(const std::string& model);
// `name` unless it is "auto", then default_optimizer(model). Throws ConfigError for an unknown
// name (rmsprop | adam | sgd | auto).
std::string resolve_optimizer(const std::string& name, const std::string& model);
// Optimizer state tensors kept per parameter tensor: rmsprop 1 (square average), adam 2, sgd 0.
int64_t optimizer_state_slots(const std::string& name);
// Float32 bytes a parameter costs with its gradient and optimizer state: 4 x (2 + slots), so 12
// for RMSProp, 16 for Adam (the paper's Table 1 counts 12).
int64_t bytes_per_parameter(const std::string& optimizer);
// A factory for Pipeline::set_optimizer (and the profilers): small learning rates, real state.
Pipeline::OptimizerFactory make_optimizer(const std::string& name);

// Physical memory of this machine, in bytes (0 if unknown).
int64_t physical_memory_bytes();

}  // namespace gpipe::tables
