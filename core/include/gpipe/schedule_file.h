// Schedules as text: a schedule a researcher writes, or edits, without touching C++.
//
// Why this file exists: the schedule set in schedule.h is closed; a new idea should be a text
// file away from the simulator, the deadlock check and a real run. The format is the drawings'
// notation, one line per device, in device order, each action in the order the device runs it:
// F, B or W, the micro-batch, a dot, the virtual stage ("F3.1"). For example zb-h1 at K=2, M=2:
//
//   # zb-h1 K=2 M=2 v=1 (gpipe_sim --write-schedule)
//   F0.0 F1.0 B0.0 W0.0 B1.0 W1.0
//   F0.1 B0.1 F1.1 B1.1 W0.1 W1.1
//
// `#` starts a comment; blank lines and "." (an idle cell of a drawing) are skipped, so a row of
// a one-stage-per-device drawing, without its "sN" label, is a valid line: "F3" without a stage
// is stage d on device d's line. The stages a line names are placed on that device; stages are
// numbered 0, 1, ... in model order, none left out, and every device runs as many (v). K is the
// number of lines, M one more than the largest micro-batch. Backwards are split into B and W for
// every stage or for none. Only compute actions are written: lower() adds R, SEND and RECV as for
// any schedule.
#pragma once

#include <string>

#include "gpipe/schedule.h"

namespace gpipe {

// The training schedule `text` describes (kind kCustom, not lowered). Throws ConfigError with
// one line naming the file's line, the action and the rule it breaks: an unreadable action, a
// stage run on two lines or left out, an F without its B (or a B before its F, a W before its
// B, an action twice), a missing F, uneven stages per device, or a dependency cycle (naming
// each line and action on it). Anything lower() would still refuse is reported as lower() does.
Schedule read_schedule(const std::string& text);

// `schedule` (compute actions, not lowered) in the format above, with a comment naming its
// kind and shape: read_schedule(write_schedule(s)) has s's devices, placement and actions.
std::string write_schedule(const Schedule& schedule);

}  // namespace gpipe
