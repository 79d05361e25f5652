// The trainer's options and their command-line flags.
//
// Why this file exists: gpipe_train, experiments/run_amoebanet.sh and the table drivers all
// describe a training run the same way; one struct and one place that declares its flags keeps
// them in step (and lets a TOML preset set any of them).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "gpipe/models/registry.h"

namespace gpipe::train {

struct TrainOptions {
  TrainOptions() { model.name = "mlp"; }

  models::ModelConfig model;
  // Pipeline.
  int64_t partitions = 0;  // 0: from --balance, or 1
  std::string balance;     // "a,b,..": layers per stage
  std::string balance_by = "params";
  int64_t chunks = 1;
  std::string checkpoint = "except_last";
  std::string schedule = "gpipe";
  std::string devices;  // "cpu:0,cpu:1"; default cpu:0..K-1
  int threads_per_device = 0;
  // Distributed: stages in separate processes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
  bool distributed = false;
  double comm_timeout = 60.0;  // seconds
  // Optimisation.
  int64_t batch_size = 64;
  int64_t steps = 10;
  double lr = 0.05;
  double momentum = 0.9;
  uint64_t seed = 0;
  // Outputs.
  std::string trace;
  std::string json;
  int64_t log_every = 1;
};

void add_train_flags(CLI::App& app, TrainOptions& options);

}  // namespace gpipe::train
