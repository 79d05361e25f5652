// Faults the tests inject through one environment variable.
//
// Why this file exists: the recovery paths (a process dying mid-snapshot, a peer sending a
// malformed message) must be exercised end to end by the real programs, so tests set
// GPIPE_FAULT_INJECT=<fault> (every process) or <fault>@<rank> (that rank only), and the code at
// the fault's site asks here. The faults: crash-during-save and slow-save (a 200 ms pause with
// the snapshot half written; train/snapshot_manager.cpp), bad-header and wrong-shape
// (process_group_transport.cpp), overflow-step-N (the loss scaler's verdict in step N is an
// overflow; pipeline.cpp).
#pragma once

#include <cstdlib>
#include <string>

namespace gpipe {

// Whether GPIPE_FAULT_INJECT asks for `fault` in this process (of rank `rank`, -1 if none).
inline bool fault_injected(const std::string& fault, int rank = -1) {
  const char* value = std::getenv("GPIPE_FAULT_INJECT");
  if (value == nullptr) return false;
  const std::string text(value);
  return text == fault || (rank >= 0 && text == fault + "@" + std::to_string(rank));
}

}  // namespace gpipe
