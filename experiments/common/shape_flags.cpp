#include "common/shape_flags.h"

#include <algorithm>
#include <cctype>

#include "common/cli.h"
#include "gpipe/device.h"
#include "gpipe/errors.h"

namespace gpipe {
namespace {

// Bounds of the flags (docs/design.md, "Bounds"): past them a run would grow memory or threads
// without doing anything useful.
constexpr int64_t kMaxDevices = 4096;                   // K, and cores to plan for
constexpr int64_t kMaxMicroBatches = int64_t{1} << 24;  // M (no more than samples in a batch)
constexpr int64_t kMaxVirtualStages = 64;               // v per device
constexpr int64_t kMaxLayers = 1 << 20;                 // layers of one device
constexpr int64_t kMaxThreads = 4096;                   // intra-op threads of one device

bool is_count(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), ::isdigit);
}

// --devices: one device spec per pipeline device ("cpu:0,cpu:1", "cuda:0"), or a number of cores to
// plan for ("4").
void check_devices(const std::string& text) {
  GPIPE_CHECK(!text.empty(), ConfigError, "an empty value (give cpu:0,cpu:1, cuda:0 or a count)");
  if (is_count(text)) {
    const auto cores = cli::parse_ints(text, "");
    GPIPE_CHECK(cores.at(0) >= 1 && cores.at(0) <= kMaxDevices, ConfigError, text,
                " is not a number of cores in [1, ", kMaxDevices, "]");
    return;
  }
  for (const auto& device : cli::parse_names(text, ""))
    DeviceSpec::parse(device);
}

}  // namespace

namespace {

// --checkpoint, --schedule and --virtual-stages.
void add_schedule_flags(CLI::App& app, PipelineShape& s, const std::string& group) {
  app.add_option_function<std::string>(
         "--checkpoint", [&s](const std::string& text) { s.checkpoint = parse_checkpoint(text); },
         "re-materialisation: always | except_last | never")
      ->default_str(to_string(s.checkpoint))
      ->check(cli::parsed_by([](const std::string& v) { parse_checkpoint(v); }))
      ->group(group);
  app.add_option_function<std::string>(
         "--schedule", [&s](const std::string& text) { set_schedule(s, text); },
         schedule_kind_names(" | ") +
             " | file:PATH (one line of actions per device, F3.1 = micro-batch 3 on virtual "
             "stage 1, as gpipe_sim --write-schedule writes them; format in "
             "core/include/gpipe/schedule_file.h)")
      ->default_str(to_string(s.schedule))
      ->check(cli::parsed_by(check_schedule))
      ->group(group);
  app.add_option("--virtual-stages", s.v,
                 "v stages per device for interleaved-1f1b and looped-bfs (default 2) and the V "
                 "schedules zbv, dualpipev and v-half (2); each --balance entry must be a "
                 "multiple of v")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, kMaxVirtualStages))
      ->group(group);
}

// The shape holds one balance (pipeline_shape.h): the second of --balance and --stage-balance is
// refused, whichever order they come in.
void check_one_balance(const PipelineShape& s, const std::string& given) {
  if (!s.balance.empty())
    throw CLI::ValidationError(s.balance.describe() + " and " + given + ": give one of them");
}

void add_balance_flag(CLI::App& app, PipelineShape& s, const std::string& group) {
  app.add_option_function<std::string>(
         "--balance",
         [&s](const std::string& text) {
           if (text.empty()) {
             if (!s.balance.per_stage()) s.balance = {};
             return;
           }
           check_one_balance(s, "--balance " + text);
           s.balance = Balance::per_device(cli::parse_ints(text, ""));
         },
         "layers per device, e.g. 3,3,2 (sets K; \"\" clears a preset's); or --stage-balance")
      ->check(cli::int_list(1, kMaxLayers, /*allow_empty=*/true))
      ->group(group);
}

void add_stage_balance_flag(CLI::App& app, PipelineShape& s, const std::string& group) {
  app.add_option_function<std::string>(
         "--stage-balance",
         [&s](const std::string& text) {
           check_one_balance(s, "--stage-balance " + text);
           s.balance = Balance::per_stage(cli::parse_ints(text, ""));
         },
         "layers per virtual stage in stage order (K*v entries), for v > 1; or --balance")
      ->check(cli::int_list(1, kMaxLayers))
      ->group(group);
}

void add_placement_flags(CLI::App& app, PipelineShape& s, int64_t& planning_cores,
                         const std::string& group) {
  app.add_option_function<std::string>(
         "--devices",
         [&s, &planning_cores](const std::string& text) {
           if (is_count(text)) {
             planning_cores = cli::parse_ints(text, "").at(0);
             s.devices.clear();
           } else {
             s.devices = cli::parse_names(text, "");
             planning_cores = 0;
           }
         },
         "one per pipeline device (K of them): cpu:0,cpu:1 or cuda:0,cuda:1")
      ->check(cli::parsed_by(check_devices))
      ->group(group);
  app.add_option("--threads-per-device", s.threads,
                 "intra-op threads per device (0: 1 when K > 1, all cores when K = 1)")
      ->capture_default_str()
      ->check(cli::int_range(0, static_cast<int>(kMaxThreads)))
      ->group(group);
}

}  // namespace

void add_shape_flags(CLI::App& app, PipelineShape& shape, int64_t& planning_cores,
                     const std::string& group, const ShapeFlagSet& which) {
  // In this order: CLI11 stores the values (and runs --schedule's reading of a file, which takes
  // the file's K and M where none is given) in the order the flags are declared.
  app.add_option("--partitions,-K", shape.K,
                 "number of devices K, each holding one stage (v with --virtual-stages); layers "
                 "auto-balanced by --balance-by")
      ->capture_default_str()
      ->check(cli::int_range(int64_t{0}, kMaxDevices))
      ->group(group);
  if (which.balances()) add_balance_flag(app, shape, group);
  if (which.chunks()) {
    app.add_option("--chunks,-M", shape.M, "micro-batches per mini-batch")
        ->capture_default_str()
        ->check(cli::int_range(int64_t{1}, kMaxMicroBatches))
        ->group(group);
  }
  add_schedule_flags(app, shape, group);
  if (which.balances()) add_stage_balance_flag(app, shape, group);
  if (which.placement()) add_placement_flags(app, shape, planning_cores, group);
}

}  // namespace gpipe
