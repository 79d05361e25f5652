// Fuzz target: the strings users type: device lists (--devices), balances and other integer and
// number lists (--balance, --chunks lists), byte sizes (--memory-per-device), plan shapes
// (gpipe_plan --grid), the paper's size configurations, class lists (--class-subset) and schedule
// files (--schedule file:PATH, read_schedule). The first byte picks the parser; a bad string must
// end in ConfigError, never a crash or an exception of another type.
#include <string>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/datasets/class_subset.h"
#include "gpipe/device.h"
#include "gpipe/errors.h"
#include "gpipe/lowering.h"
#include "gpipe/schedule_file.h"
#include "plan/planner.h"
#include "tables/max_size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 8) {
      case 0:
        for (const auto& device : gpipe::parse_devices(text))
          if (device.index < 0) std::abort();
        break;
      case 1:
        gpipe::cli::parse_ints(text, "--balance");
        break;
      case 2:
        gpipe::cli::parse_doubles(text, "--values");
        break;
      case 3:
        if (gpipe::parse_bytes(text, "--memory-per-device") <= 0) std::abort();
        break;
      case 4:
        gpipe::parse_shape(text);
        break;
      case 5:
        gpipe::tables::parse_size_config(text);
        break;
      case 7:  // a schedule file read must lower under every mode
        for (auto mode : {gpipe::Checkpoint::kNever, gpipe::Checkpoint::kAlways})
          gpipe::lower(gpipe::read_schedule(text), mode);
        break;
      default:
        for (const int64_t c : gpipe::datasets::parse_class_list(text))
          if (c < 0) std::abort();
        break;
    }
  } catch (const gpipe::Error&) {
  }
  return 0;
}
