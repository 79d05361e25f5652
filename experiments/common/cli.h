// What every driver's command line shares: list parsing, logging set-up, exit codes.
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

#include "gpipe/exit_codes.h"

namespace gpipe::cli {

using gpipe::kExitBadInput;
using gpipe::kExitFailure;
using gpipe::kExitOk;

// "1,2.5,3" -> {1, 2.5, 3}. Throws ConfigError naming `flag` and the bad or empty item.
std::vector<double> parse_doubles(const std::string& text, const std::string& flag);
std::vector<int64_t> parse_ints(const std::string& text, const std::string& flag);
std::vector<std::string> parse_strings(const std::string& text, char separator = ',');

// A flag's number must be finite and within [low, high]: CLI11's Range lets NaN through.
CLI::Validator finite_range(double low, double high);

// Checks a TOML file of flags for what CLI11 would take silently: a key given twice, and a list
// for a flag that takes one value (CLI11 would keep its last item). Throws ConfigError naming
// the file, the line and the key. `--config PATH` in argv (or --config=PATH) names the file.
void check_config_file(const CLI::App& app, const std::string& path);
void check_config_files(const CLI::App& app, int argc, char** argv);

// Checks, before any work, that `path` (given by `flag`) can be written: not a folder, its
// folder exists and is writable. Throws ConfigError naming the flag, the path and the fix; a
// run must not train for an hour and then fail to write its result.
void check_output_file(const std::string& path, const std::string& flag);

// Logs to stderr with a short pattern; "debug" | "info" | "warn" | "error".
void setup_logging(const std::string& level = "info");

// The program's name (without its folder) and its arguments, as a result file records them;
// an empty argument or one with spaces or quotes is single-quoted, so the line runs in a shell.
std::string command_line(int argc, char** argv);

// Parses the command line, then runs `body`; maps exceptions to messages and exit codes.
int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

}  // namespace gpipe::cli
