// Lowering: a schedule's compute actions become the complete program every consumer reads.
//
// Why this file exists: the recompute rule and who talks to whom are decided once, here. lower()
// marks each checkpointed F, puts its R just before the RECV of the gradient (so the replay
// overlaps the wait), and brackets every F and B with the RECV it needs and the SEND it owes,
// naming the peer virtual stage. validate_schedule() then proves the list complete, ordered and
// free of deadlock. The executor, the transports and the simulator only follow the list.
#pragma once

#include "gpipe/schedule.h"
#include "gpipe/stage.h"

namespace gpipe {

// Whether micro-batch m of M keeps only its input in forward under `mode`.
bool is_checkpointed(Checkpoint mode, int64_t microbatch, int64_t microbatches);

// Adds R (training schedules, checkpointed micro-batches), SEND and RECV, marks each stage's
// last B or W as its final_gradient, and validates the result. A SEND to a virtual stage on the
// same device stays in the list: the transport delivers it locally. Throws ConfigError when
// `compute` is invalid or already lowered.
Schedule lower(const Schedule& compute, Checkpoint checkpoint);

// Throws ConfigError, naming the device and action, unless: every action's stage is on the device
// that lists it; every (stage, micro-batch) runs F once and (training) B once after it, W at most
// once after B (for all or none), R exactly once between F and B when F is checkpointed; in a
// lowered list every F and B has its RECV before it and its SEND after it, each SEND matching
// one RECV at the peer, and each stage of a training schedule marks exactly its last B or W as
// final_gradient; and the devices can run their lists to the end without deadlock (a
// RECV waits for its SEND; sends never block).
void validate_schedule(const Schedule& schedule);

// How far each device gets when every device runs its list as far as its inputs allow (a RECV
// waits for its SEND; in a list not lowered, an F for the F of the stage before and a B for the
// B of the stage after): the index of the action it waits at, or its list's size where it
// finishes. The deadlock check's run; read_schedule follows the waits to name a cycle.
std::vector<size_t> run_until_blocked(const Schedule& schedule);

}  // namespace gpipe
