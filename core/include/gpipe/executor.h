// The executor: runs one stage's list of actions for one step.
//
// Why this file exists: one loop serves every schedule and every transport. For each action of
// its stage it receives what the action needs (data or the previous stage's activations for F;
// the next stage's gradients for B), runs it on the stage, times it, and sends the result on.
// The in-process Pipeline runs it on K worker threads; a distributed rank runs it for its own
// stage over c10d.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "gpipe/schedule.h"
#include "gpipe/stage.h"
#include "gpipe/timeline.h"
#include "gpipe/transport.h"

namespace gpipe {

// What a step needs besides the stages. Vectors are indexed by micro-batch; `inputs` is read by
// the first stage, `targets` and `weights` by the last.
struct StepData {
  int64_t step = 0;
  uint64_t seed = 0;
  bool training = true;
  Checkpoint checkpoint = Checkpoint::kExceptLast;
  const LossFn* loss = nullptr;
  std::vector<Activations> inputs;
  std::vector<torch::Tensor> targets;
  std::vector<double> weights;
};

// Runs `actions` (one stage's list from a Schedule over `microbatches`) on `stage`. In
// evaluation (data.training false) the actions are forwards and the last stage's outputs are
// stored into `outputs` (sized M). Events go to `timeline` when it is not null.
void run_stage_actions(Stage& stage, const std::vector<Action>& actions, int64_t microbatches,
                       const StepData& data, Transport& transport, Timeline* timeline,
                       std::vector<Activations>* outputs = nullptr);

}  // namespace gpipe
