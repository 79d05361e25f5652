// The executor: runs one device's lowered action list for one step.
//
// Why this file exists: one loop serves every schedule and every transport, and it decides
// nothing: the lowered list (lowering.h) already says which forwards keep only their input, when
// to recompute, what to receive from whom before an action and what to send after it. RECV puts
// a message in a slot, F and B take their inputs from slots and leave their outputs in slots,
// SEND hands a slot to the transport. Every action is timed. The in-process Pipeline runs it on
// K worker threads; a distributed rank runs it for its own device over c10d.
#pragma once

#include <torch/torch.h>

#include <atomic>

#include <vector>

#include "gpipe/grad_reducer.h"
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
  const LossFn* loss = nullptr;
  std::vector<Activations> inputs;
  std::vector<torch::Tensor> targets;
  std::vector<double> weights;
  // Told when each stage's gradients become final (data-parallel training only).
  GradientReducer* reducer = nullptr;
  // When set, counts the bytes of every message sent from one device to another.
  std::atomic<int64_t>* sent_bytes = nullptr;
};

// Runs device `device`'s list of the lowered `schedule`. `stages[s]` is virtual stage s when this
// process holds it (at least every stage of `device`), else null. In evaluation the last stage's
// outputs go to `outputs` (sized M). Events go to `timeline` (row = device) when not null.
void run_device_actions(int64_t device, const Schedule& schedule, const std::vector<Stage*>& stages,
                        const StepData& data, Transport& transport, Timeline* timeline,
                        std::vector<Activations>* outputs = nullptr);

}  // namespace gpipe
