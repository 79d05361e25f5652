// Schedules as data.
//
// Why this file exists: what each stage does, and in which order, is a pure function of
// (K stages, M micro-batches, kind). The executor runs whatever list it is given and the
// simulator reads the same lists, so a new schedule is a new function here and nothing else.
//
// GPipe (fill-drain, the paper's): every forward, then every backward, last micro-batch first
// (its activations are the freshest, and with checkpoint=except_last it needs no recompute).
// K=3, M=4, unit costs:
//
//   clock  0  1  2  3  4  5  6  7  8  9  10 11
//   s0     F0 F1 F2 F3 .  .  .  .  B3 B2 B1 B0
//   s1     .  F0 F1 F2 F3 .  .  B3 B2 B1 B0 .
//   s2     .  .  F0 F1 F2 F3 B3 B2 B1 B0 .  .
//
// 1F1B (PipeDream-flush): stage s runs K-s-1 warm-up forwards, then alternates one forward and
// one backward, then drains. Same bubble, but a stage holds the activations of at most K
// micro-batches at once instead of M:
//
//   clock  0  1  2  3  4  5  6  7  8  9  10 11
//   s0     F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3
//   s1     .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 .
//   s2     .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

enum class ActionKind { kForward, kBackward };

struct Action {
  ActionKind kind;
  int64_t microbatch;

  bool operator==(const Action& other) const {
    return kind == other.kind && microbatch == other.microbatch;
  }
};

enum class ScheduleKind { kGPipe, k1F1B };

// For each stage, its actions in execution order.
struct Schedule {
  int64_t stages = 0;
  int64_t microbatches = 0;
  std::vector<std::vector<Action>> actions;
};

// The schedule of a training step. Throws ConfigError for K < 1 or M < 1.
Schedule make_schedule(ScheduleKind kind, int64_t stages, int64_t microbatches);

// Forwards only, in micro-batch order: evaluation.
Schedule make_forward_schedule(int64_t stages, int64_t microbatches);

// Throws ConfigError unless every stage runs F(m) once and B(m) once after it for every
// micro-batch (forward-only schedules: F only), and the cross-stage dependencies
// (F(s, m) after F(s-1, m); B(s, m) after B(s+1, m)) can all be met without deadlock.
void validate_schedule(const Schedule& schedule, bool forward_only = false);

// Micro-batches whose activations each stage holds at once (forwards not yet matched by their
// backward), maximised over the step.
std::vector<int64_t> peak_inflight(const Schedule& schedule);

ScheduleKind parse_schedule_kind(const std::string& name);  // "gpipe" | "1f1b"
std::string to_string(ScheduleKind kind);
std::string to_string(const Action& action);  // "F3", "B0"

}  // namespace gpipe
