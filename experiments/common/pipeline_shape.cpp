#include "common/pipeline_shape.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/lists.h"
#include "gpipe/errors.h"

namespace gpipe {
namespace {

int64_t parse_positive(const std::string& key, const std::string& value) {
  const auto numbers = cli::parse_ints(value, key);
  GPIPE_CHECK(numbers.size() == 1 && numbers[0] >= 1, ConfigError, "plan key ", key,
              " needs one integer >= 1, got '", value, "'");
  return numbers[0];
}

constexpr char kFilePrefix[] = "file:";
constexpr size_t kMaxScheduleFileBytes = size_t{16} << 20;

// The schedule in `path`, read once: an error names the path and, for a bad file, its line.
std::shared_ptr<const Schedule> read_schedule_file(const std::string& path) {
  // Only a regular file: a folder, a device or a pipe would fail late or block (std::error_code:
  // a name too long for the system is an answer too, not an exception).
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  GPIPE_CHECK(!std::filesystem::is_directory(status), ConfigError, "schedule file '",
              printable(path), "' is a folder");
  GPIPE_CHECK(std::filesystem::is_regular_file(status), ConfigError, "cannot read schedule file '",
              printable(path), "'", error ? ": " + error.message() : ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  GPIPE_CHECK(in.good(), ConfigError, "cannot read schedule file '", printable(path), "'");
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    GPIPE_CHECK(text.size() <= kMaxScheduleFileBytes, ConfigError, "schedule file ", path,
                " is larger than ", kMaxScheduleFileBytes >> 20, " MiB");
  }
  try {
    return std::make_shared<const Schedule>(read_schedule(text));
  } catch (const ConfigError& e) {
    throw ConfigError(c10::str("schedule file ", printable(path), ": ", e.what()));
  }
}

}  // namespace

void set_schedule(PipelineShape& s, const std::string& text) {
  if (text.rfind(kFilePrefix, 0) != 0) {
    s.schedule = parse_schedule_kind(text);
    s.schedule_file.clear();
    s.program = nullptr;
    return;
  }
  s.schedule_file = text.substr(sizeof(kFilePrefix) - 1);
  s.program = read_schedule_file(s.schedule_file);
  s.schedule = ScheduleKind::kCustom;
  if (s.K == 0) s.K = s.program->devices;
  if (s.M == 1) s.M = s.program->microbatches;
  s.v = s.program->virtual_stages;
}

void check_schedule(const std::string& text) {
  PipelineShape probe;
  set_schedule(probe, text);
}

int64_t PipelineShape::virtual_stages() const {
  if (program) return program->virtual_stages;
  return v > 0 ? v : default_virtual_stages(schedule);
}

std::vector<int64_t> PipelineShape::placement() const {
  return program ? program->stage_device : gpipe::placement(schedule, K, virtual_stages());
}

Schedule PipelineShape::training_schedule() const {
  return program ? *program : make_schedule(schedule, K, M, virtual_stages());
}

std::string Balance::describe() const {
  return (per_stage() ? "--stage-balance " : "--balance ") + c10::Join(",", layers);
}

std::vector<int64_t> PipelineShape::device_balance() const {
  if (!balance.per_stage()) return balance.layers;
  PipelineShape sized = *this;
  sized.K = devices_of_stage_balance(balance.layers, K, virtual_stages());
  return sum_per_device(sized.placement(), sized.K, balance.layers);
}

std::vector<int64_t> PipelineShape::stage_balance() const {
  if (balance.per_stage() || balance.empty()) return balance.layers;
  int64_t layers = 0;
  for (int64_t n : balance.layers)
    layers += n;
  return make_layout(to_pipeline_options(*this), layers).stage_balance;
}

std::string PipelineShape::schedule_name() const {
  return program ? kFilePrefix + schedule_file : to_string(schedule);
}

bool PipelineShape::operator==(const PipelineShape& o) const {
  return K == o.K && R == o.R && M == o.M && schedule == o.schedule &&
         schedule_file == o.schedule_file && v == o.v && checkpoint == o.checkpoint &&
         balance == o.balance && devices == o.devices && threads == o.threads &&
         precision == o.precision;
}

std::string PipelineShape::describe() const {
  std::ostringstream out;
  out << "K=" << K << ",R=" << R << ",M=" << M << ",schedule=" << schedule_name()
      << ",v=" << virtual_stages() << ",checkpoint=" << to_string(checkpoint)
      << ",threads=" << threads;
  return out.str();
}

PipelineShape parse_shape(const std::string& text) {
  PipelineShape shape;
  shape.K = 1;
  shape.checkpoint = Checkpoint::kNever;
  shape.threads = 1;
  bool v_given = false;
  for (const auto& item : cli::parse_strings(text)) {
    const auto eq = item.find('=');
    GPIPE_CHECK(eq != std::string::npos, ConfigError, "plan item '", item,
                "' is not key=value (keys: K, R, M, schedule, v, checkpoint, threads)");
    const auto key = item.substr(0, eq);
    const auto value = item.substr(eq + 1);
    if (key == "K") {
      shape.K = parse_positive(key, value);
    } else if (key == "R") {
      shape.R = parse_positive(key, value);
    } else if (key == "M") {
      shape.M = parse_positive(key, value);
    } else if (key == "v") {
      shape.v = parse_positive(key, value);
      v_given = true;
    } else if (key == "threads") {
      shape.threads = static_cast<int>(parse_positive(key, value));
    } else if (key == "schedule") {
      set_schedule(shape, value);
    } else if (key == "checkpoint") {
      shape.checkpoint = parse_checkpoint(value);
    } else {
      throw ConfigError("unknown plan key '" + key + "' in '" + text +
                        "': expected K, R, M, schedule, v, checkpoint, threads");
    }
  }
  if (!v_given) shape.v = default_virtual_stages(shape.schedule);
  check_virtual_stages(shape.schedule, shape.v);
  return shape;
}

std::vector<std::string> to_flags(const PipelineShape& shape) {
  std::vector<std::string> flags = {"--partitions", std::to_string(shape.K)};
  if (!shape.balance.empty()) {
    flags.insert(flags.end(), {shape.balance.per_stage() ? "--stage-balance" : "--balance",
                               c10::Join(",", shape.balance.layers)});
  }
  flags.insert(flags.end(), {"--chunks", std::to_string(shape.M), "--schedule",
                             shape.schedule_name(), "--virtual-stages", std::to_string(shape.v),
                             "--checkpoint", to_string(shape.checkpoint), "--threads-per-device",
                             std::to_string(shape.threads)});
  if (!shape.devices.empty())
    flags.insert(flags.end(), {"--devices", c10::Join(",", shape.devices)});
  return flags;
}

int64_t devices_of_stage_balance(const std::vector<int64_t>& stage_balance, int64_t K, int64_t v) {
  const auto S = static_cast<int64_t>(stage_balance.size());
  GPIPE_CHECK(S % v == 0 && (K == 0 || K * v == S), ConfigError, "--stage-balance has ", S,
              " entries; it needs K x v = ",
              K > 0 ? std::to_string(K * v) : "a multiple of v=" + std::to_string(v));
  return S / v;
}

void set_stage_balance(PipelineShape& shape, std::vector<int64_t> stage_balance) {
  shape.balance =
      shape.virtual_stages() > 1
          ? Balance::per_stage(std::move(stage_balance))
          : Balance::per_device(sum_per_device(shape.placement(), shape.K, stage_balance));
}

PipelineOptions to_pipeline_options(const PipelineShape& shape) {
  PipelineOptions options(shape.device_balance());
  options.chunks(shape.M)
      .checkpoint(shape.checkpoint)
      .schedule(shape.schedule)
      .program(shape.program)
      .virtual_stages(shape.v)
      .stage_balance(shape.balance.explicit_stages())
      .threads_per_device(shape.threads)
      .precision(shape.precision);
  if (!shape.devices.empty()) options.devices(shape.devices);
  return options;
}

}  // namespace gpipe
