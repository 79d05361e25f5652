// One exit-code rule for the programs a user runs from build/bin (the drivers, model_info,
// dataset_info, gpipe_bench; not the test and fuzz binaries).
//
// Why this file exists: scripts and the drivers' tests tell bad input from a failure by the exit
// code alone, so every program, from the training drivers to model_info and dataset_info, must
// use the same three codes and report a bad flag the same way: one line naming it, never a
// backtrace. Header-only (CLI11 is header-only too), so the tools of models/ and datasets/ share
// it without linking the drivers' library.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <string>

#include "gpipe/errors.h"

namespace gpipe {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;   // a failure while running
constexpr int kExitBadInput = 2;  // bad flags, configuration or data

// The code for a program stopped by `e`: bad configuration or input (ConfigError, InputError,
// missing or corrupt data included) is kExitBadInput, anything else kExitFailure.
inline int exit_code_for(const std::exception& e) {
  const bool bad_input = dynamic_cast<const ConfigError*>(&e) != nullptr ||
                         dynamic_cast<const InputError*>(&e) != nullptr;
  return bad_input ? kExitBadInput : kExitFailure;
}

// Parses the command line into `app`. Returns nothing when the program should go on, otherwise
// the code to exit with: kExitOk after --help (printed), kExitBadInput after a bad flag or value,
// reported as one line on stderr that names it and points to --help.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::string program = argc > 0 ? argv[0] : "";
    program = program.substr(program.find_last_of('/') + 1);
    std::cerr << program << ": " << printable(e.what()) << " (see --help)\n";
    return kExitBadInput;
  }
}

}  // namespace gpipe
