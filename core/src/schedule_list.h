// The list scheduler behind zbv, zb-h2 and v-half (schedule_list.cpp): private to schedule.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "gpipe/schedule.h"

namespace gpipe {

// What a list-scheduled order may do: where each virtual stage runs, how many stage
// micro-batches (a forward not yet freed by its W) each device may hold before it must run a W,
// and how often a new micro-batch may enter the first stage.
struct ListRule {
  std::vector<int64_t> stage_device;  // device of each virtual stage, in model order
  std::vector<int64_t> limit;         // per device
  // Micro-batch m enters stage 0 no earlier than m x entry_interval (0: as soon as the device is
  // free). Pacing entries at the steady state's rate keeps each micro-batch's life short, and
  // so the activations held at once few, without a limit that could stall the V.
  int64_t entry_interval = 0;
};

// Each device's F, B and W at unit costs: the ready action that can start first (B before F on
// a tie), forwards only within the memory limit, a deferred W where it ends before the next input
// arrives or where memory forces it. Throws Error if every device waits.
std::vector<std::vector<Action>> list_schedule(int64_t K, int64_t M, ListRule rule);

}  // namespace gpipe
