#include "gpipe/schedule_file.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include "gpipe/errors.h"
#include "gpipe/lowering.h"

namespace gpipe {
namespace {

// Micro-batch and stage numbers: far beyond any run, small enough that nothing overflows.
constexpr int64_t kMaxIndex = 1 << 20;
constexpr int64_t kMaxDevices = 4096;

// One action as the file wrote it, and where.
struct Entry {
  Action action;
  int64_t line = 0;
  std::string token;
};

// The file's device lines: each device's line number and actions in order.
struct Lines {
  std::vector<int64_t> line;
  std::vector<std::vector<Entry>> devices;
};

// A token as a message shows it: at most 40 characters, bytes that do not print as \xNN.
std::string shown(const std::string& token) {
  return token.size() > 40 ? printable(token.substr(0, 40)) + "..." : printable(token);
}

std::string at(const Entry& e) {
  return c10::str("line ", e.line, ", ", shown(e.token), ": ");
}

std::string name(ActionKind kind, int64_t m, int64_t s) {
  const char* letter = kind == ActionKind::kForward    ? "F"
                       : kind == ActionKind::kBackward ? "B"
                                                       : "W";
  return c10::str(letter, m, ".", s);
}

std::optional<int64_t> parse_index(const std::string& text) {
  if (text.empty() || text.size() > 7 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  const int64_t value = std::stoll(text);
  return value <= kMaxIndex ? std::optional<int64_t>(value) : std::nullopt;
}

// "F3.1", or "F3" for stage `device` (one stage per device, as the drawings write it).
std::optional<Action> parse_action(const std::string& token, int64_t device) {
  if (token.size() < 2) return std::nullopt;
  Action a;
  switch (token[0]) {
    case 'F':
      a.kind = ActionKind::kForward;
      break;
    case 'B':
      a.kind = ActionKind::kBackward;
      break;
    case 'W':
      a.kind = ActionKind::kWeight;
      break;
    default:
      return std::nullopt;
  }
  const auto dot = token.find('.');
  const auto m = parse_index(token.substr(1, dot == std::string::npos ? dot : dot - 1));
  const auto s = dot == std::string::npos ? std::optional<int64_t>(device)
                                          : parse_index(token.substr(dot + 1));
  if (!m || !s) return std::nullopt;
  a.microbatch = *m;
  a.stage = *s;
  return a;
}

Lines read_lines(const std::string& text) {
  Lines lines;
  std::istringstream in(text);
  int64_t number = 0;
  for (std::string row; std::getline(in, row);) {
    ++number;
    row = row.substr(0, row.find('#'));
    std::istringstream words(row);
    std::vector<Entry> entries;
    for (std::string token; words >> token;) {
      if (token == ".") continue;
      const auto device = static_cast<int64_t>(lines.devices.size());
      const auto action = parse_action(token, device);
      GPIPE_CHECK(action.has_value(), ConfigError, "line ", number, ", ", shown(token),
                  ": not an action; write F, B or W, the micro-batch, '.', the virtual stage "
                  "(F3.1), numbers up to ",
                  kMaxIndex);
      entries.push_back(Entry{*action, number, token});
    }
    if (entries.empty()) continue;
    GPIPE_CHECK(static_cast<int64_t>(lines.devices.size()) < kMaxDevices, ConfigError, "line ",
                number, ": more than ", kMaxDevices, " device lines");
    lines.line.push_back(number);
    lines.devices.push_back(std::move(entries));
  }
  GPIPE_CHECK(!lines.devices.empty(), ConfigError,
              "no device lines: write one line of actions per device (F0.0 B0.0 ...)");
  return lines;
}

// Places each stage on the device whose line names it; sets K, v, M and stage_device.
void place_stages(const Lines& lines, Schedule& schedule) {
  const auto K = static_cast<int64_t>(lines.devices.size());
  std::map<int64_t, int64_t> device_of;  // stage -> device
  std::map<int64_t, const Entry*> first_naming;
  int64_t M = 0;
  for (int64_t d = 0; d < K; ++d) {
    for (const auto& e : lines.devices[d]) {
      const auto [it, fresh] = device_of.emplace(e.action.stage, d);
      GPIPE_CHECK(fresh || it->second == d, ConfigError, at(e), "stage ", e.action.stage,
                  " already runs on line ", lines.line[it->second], "; a stage runs on one device");
      first_naming.emplace(e.action.stage, &e);
      M = std::max(M, e.action.microbatch + 1);
    }
  }
  const auto S = static_cast<int64_t>(device_of.size());
  for (int64_t s = 0; s < S; ++s) {
    if (device_of.count(s) > 0) continue;
    const Entry& beyond = *first_naming.upper_bound(s)->second;
    throw ConfigError(c10::str(at(beyond), "names stage ", beyond.action.stage,
                               ", but no line runs stage ", s,
                               "; stages are 0, 1, ... in model order, none left out"));
  }
  std::vector<int64_t> per_device(K, 0);
  for (const auto& [s, d] : device_of)
    ++per_device[d];
  for (int64_t d = 0; d < K; ++d) {
    GPIPE_CHECK(per_device[d] == per_device[0], ConfigError, "line ", lines.line[d], " runs ",
                per_device[d], " stages but line ", lines.line[0], " runs ", per_device[0],
                "; every device runs as many (v)");
  }
  schedule.devices = K;
  schedule.virtual_stages = per_device[0];
  schedule.microbatches = M;
  for (const auto& [s, d] : device_of)
    schedule.stage_device.push_back(d);
}

// Where each (stage, micro-batch)'s F, B and W stand on its line.
struct Seen {
  const Entry* forward = nullptr;
  const Entry* backward = nullptr;
  const Entry* weight = nullptr;
};

// Every F has its B after it, every W its B before it, nothing twice, every stage every
// micro-batch, and W for every B or for none.
void check_actions(const Lines& lines, const Schedule& schedule) {
  std::map<std::pair<int64_t, int64_t>, Seen> seen;
  bool split = false;
  for (const auto& device : lines.devices) {
    for (const auto& e : device) {
      const auto& a = e.action;
      Seen& s = seen[{a.stage, a.microbatch}];
      const Entry** slot = a.kind == ActionKind::kForward    ? &s.forward
                           : a.kind == ActionKind::kBackward ? &s.backward
                                                             : &s.weight;
      GPIPE_CHECK(*slot == nullptr, ConfigError, at(e), "runs twice on this line");
      const Entry* before = a.kind == ActionKind::kBackward ? s.forward
                            : a.kind == ActionKind::kWeight ? s.backward
                                                            : &e;
      GPIPE_CHECK(
          before != nullptr, ConfigError, at(e), "no ",
          name(a.kind == ActionKind::kBackward ? ActionKind::kForward : ActionKind::kBackward,
               a.microbatch, a.stage),
          " before it on this line");
      *slot = &e;
      split = split || a.kind == ActionKind::kWeight;
    }
  }
  for (int64_t stage = 0; stage < schedule.num_stages(); ++stage) {
    const auto d = schedule.device_of(stage);
    for (int64_t m = 0; m < schedule.microbatches; ++m) {
      const auto it = seen.find({stage, m});
      GPIPE_CHECK(it != seen.end(), ConfigError, "line ", lines.line[d], ": stage ", stage,
                  " never runs micro-batch ", m, " (no ", name(ActionKind::kForward, m, stage),
                  "); another line runs micro-batches up to ", schedule.microbatches - 1);
      const Seen& s = it->second;
      GPIPE_CHECK(s.backward != nullptr, ConfigError, at(*s.forward), "no ",
                  name(ActionKind::kBackward, m, stage),
                  " after it on this line (every F needs its B)");
      GPIPE_CHECK(!split || s.weight != nullptr, ConfigError, at(*s.backward), "no ",
                  name(ActionKind::kWeight, m, stage),
                  " after it, but the file splits other backwards: give every B its W, or none");
    }
  }
}

// What an action that cannot run waits for on another line: the F of the stage before it, or
// the B of the stage after it (the only waits of a list not lowered: run_until_blocked).
Action awaited(const Action& a) {
  return a.kind == ActionKind::kForward ? Action{ActionKind::kForward, a.stage - 1, a.microbatch}
                                        : Action{ActionKind::kBackward, a.stage + 1, a.microbatch};
}

// Where the devices stop short of their lines' ends, follows who waits for whom to the cycle.
void check_cycle(const Lines& lines, const Schedule& schedule) {
  const auto next = run_until_blocked(schedule);
  int64_t d = 0;
  while (d < schedule.devices && next[d] == lines.devices[d].size())
    ++d;
  if (d == schedule.devices) return;
  std::map<int64_t, size_t> visited;  // device -> its place in the chain
  std::vector<std::string> chain;
  while (visited.count(d) == 0) {
    visited[d] = chain.size();
    const Entry& e = lines.devices[d][next[d]];
    const auto dep = awaited(e.action);
    const int64_t other = schedule.device_of(dep.stage);
    chain.push_back(c10::str("line ", e.line, " ", shown(e.token), " waits for ",
                             name(dep.kind, dep.microbatch, dep.stage), " on line ",
                             lines.line[other]));
    d = other;
  }
  std::string cycle;
  for (size_t i = visited[d]; i < chain.size(); ++i)
    cycle += (cycle.empty() ? "" : ", ") + chain[i];
  throw ConfigError("dependency cycle: " + cycle);
}

}  // namespace

Schedule read_schedule(const std::string& text) {
  const Lines lines = read_lines(text);
  Schedule schedule;
  schedule.kind = ScheduleKind::kCustom;
  place_stages(lines, schedule);
  check_actions(lines, schedule);
  schedule.actions.resize(schedule.devices);
  for (int64_t d = 0; d < schedule.devices; ++d) {
    for (const auto& e : lines.devices[d])
      schedule.actions[d].push_back(e.action);
  }
  check_cycle(lines, schedule);
  validate_schedule(schedule);
  return schedule;
}

std::string write_schedule(const Schedule& schedule) {
  std::string out = c10::str("# ", to_string(schedule.kind), " K=", schedule.devices,
                             " M=", schedule.microbatches, " v=", schedule.virtual_stages,
                             " (F, B, W micro-batch.stage; one line per device)\n");
  for (const auto& device : schedule.actions) {
    std::string line;
    for (const auto& a : device) {
      if (a.kind != ActionKind::kForward && a.kind != ActionKind::kBackward &&
          a.kind != ActionKind::kWeight) {
        continue;  // R, SEND and RECV: lower() adds them again
      }
      line += (line.empty() ? "" : " ") + name(a.kind, a.microbatch, a.stage);
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace gpipe
