// The optimisers and learning-rate schedules the paper's recipes use.
//
// Why this file exists: AmoebaNet trains with RMSProp and an exponentially decaying learning
// rate after a warm-up, the Transformer with Adam, fine-tuning with SGD and Nesterov momentum;
// the trainer turns flags into one optimiser per stage and a learning rate per step.
#pragma once

#include "gpipe/pipeline.h"
#include "train/train_options.h"

namespace gpipe::train {

// One optimiser per stage, as the flags say. Throws ConfigError for an unknown optimiser or
// out-of-range settings, naming the value.
Pipeline::OptimizerFactory make_optimizer_factory(const TrainOptions& options);

// Learning rate of each step: linear warm-up from 0 to the peak over `warmup_steps`, then
// constant, cosine to `min_lr` at `total_steps`, or exponential decay by `decay` every
// `decay_epochs` epochs (staircase, as the AmoebaNet recipe).
class LrSchedule {
 public:
  LrSchedule(const TrainOptions& options, int64_t total_steps, int64_t steps_per_epoch);
  double at(int64_t step) const;

 private:
  std::string kind_;
  double peak_;
  int64_t warmup_;
  int64_t total_;
  int64_t steps_per_epoch_;
  double decay_;
  double decay_epochs_;
  double min_lr_;
};

}  // namespace gpipe::train
