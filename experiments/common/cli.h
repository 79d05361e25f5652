// What every driver's command line shares: validators, logging set-up, exit codes (the list
// parsing it checks values with is common/lists.h).
//
// Why this file exists: every program in build/bin must treat bad input the same way — a clear
// message on stderr and exit code 2, never a crash or a stack trace — and `--help` must work
// the same everywhere. run_main() wraps a driver's body to give exactly that: 0 on success,
// 2 for bad flags, configurations or data, 1 for failures while running.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "common/lists.h"
#include "gpipe/exit_codes.h"
#include "gpipe/precision.h"
#include "gpipe/timeline.h"

namespace gpipe::cli {

using gpipe::kExitBadInput;
using gpipe::kExitFailure;
using gpipe::kExitOk;

// A flag's number must be finite and within [low, high] (or (low, high], or [low, high)):
// CLI11's Range lets NaN through and knows no open ends.
enum class Interval { kClosed, kOpenLow, kOpenHigh };
CLI::Validator finite_range(double low, double high, Interval interval = Interval::kClosed);

using gpipe::int_range;
using gpipe::parsed_by;
// A comma-separated list of integers, each within [low, high] (an empty list when `allow_empty`).
CLI::Validator int_list(int64_t low, int64_t high, bool allow_empty = false);
// A comma-separated list of names, none empty, each passed to `check` (which throws for an
// unknown one).
CLI::Validator name_list(std::function<void(const std::string&)> check);
// A file the program will write (check_output_file), a folder it will create or write into (its
// nearest existing ancestor is a writable folder); an empty value passes when `allow_empty`.
CLI::Validator output_file();
CLI::Validator output_folder(bool allow_empty = false);

// --log-level: debug | info | warn | error, into `level`.
CLI::Option* add_log_level_flag(CLI::App& app, std::string& level);
// --precision: fp32 | bf16 | fp16, parsed into `precision` as it is read (a bad name refused
// naming it); `help` says what the program computes in it.
CLI::Option* add_precision_flag(CLI::App& app, Precision& precision, const std::string& help);

// Checks a TOML file of flags for what CLI11 would take silently: a key given twice, and a list
// for a flag that takes one value (CLI11 would keep its last item). Throws ConfigError naming
// the file, the line and the key. `--config PATH` in argv (or --config=PATH) names the file.
void check_config_file(const CLI::App& app, const std::string& path);
void check_config_files(const CLI::App& app, int argc, char** argv);

// gpipe/timeline.h's checks of an output path, used by the drivers.
using gpipe::check_output_file;
using gpipe::check_output_folder;

// Logs to stderr with a short pattern; "debug" | "info" | "warn" | "error".
void setup_logging(const std::string& level = "info");

// The program's name (without its folder) and its arguments, as a result file records them;
// an empty argument or one with spaces or quotes is single-quoted, so the line runs in a shell.
std::string command_line(int argc, char** argv);

// Parses the command line, then runs `body`; maps exceptions to messages and exit codes.
int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

}  // namespace gpipe::cli
