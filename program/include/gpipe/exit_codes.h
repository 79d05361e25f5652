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

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
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

// Checks a flag's value, when the command line is read, with the function that will read it:
// the value is refused with the message of what `check` throws (a ConfigError naming the value).
// Every value is thus checked before any work starts, by one piece of code.
inline CLI::Validator parsed_by(std::function<void(const std::string&)> check) {
  return CLI::Validator(
      [check = std::move(check)](std::string& text) -> std::string {
        try {
          check(text);
          return std::string();
        } catch (const std::exception& e) {
          return printable(e.what());
        }
      },
      std::string());
}

// A flag's integer within [low, high], both ends included, read as CLI11 reads it (strtoll,
// base from the prefix). CLI11's Range answers a word, a fraction or an exponent with "Value x
// not in range ..."; this says "'x' is not an integer", or "-1 is not an integer in [0, 256]".
// --help shows "INT in [low - high]", as for CLI11's Range.
inline CLI::Validator int_range(int64_t low, int64_t high) {
  const std::string range = "[" + std::to_string(low) + ", " + std::to_string(high) + "]";
  return CLI::Validator(
      [low, high, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(text.c_str(), &end, 0);
        if (text.empty() || end != text.c_str() + text.size())
          return "'" + printable(text) + "' is not an integer";
        if (errno == ERANGE || value < low || value > high)
          return text + " is not an integer in " + range;
        return std::string();
      },
      "INT in [" + std::to_string(low) + " - " + std::to_string(high) + "]");
}

// What CLI11 (2.1) would take without a word, refused for every flag of `app` before its own
// checks: for a number, an empty value (read as 0), an integer past its type's range (clamped), a
// negative value for an unsigned one (wrapped), and NaN or an infinity for a real; for a switch,
// a value other than true/false, yes/no, on/off or a count (`--batch-norm=maybe`, which ends in an
// uncaught exception inside CLI11). The validators carry no description: --help is unchanged.
inline void check_flag_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_expected_max() == 0) {  // a switch
      option->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              (void)CLI::detail::to_flag_value(text);
              return std::string();
            } catch (const std::exception&) {
              return "'" + printable(text) + "' is not true or false";
            }
          },
          std::string()));
      continue;
    }
    const std::string type = option->get_type_name();
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    const bool is_integer = is_unsigned || type.rfind("INT", 0) == 0;
    if (!is_integer && type.rfind("FLOAT", 0) != 0) continue;
    option->check(CLI::Validator(
        [is_integer, is_unsigned](std::string& text) -> std::string {
          const std::string shown = "'" + printable(text) + "'";
          if (text.empty()) return "an empty value is not a number";
          char* end = nullptr;
          errno = 0;
          if (is_integer) {
            if (is_unsigned && text.find('-') != std::string::npos)
              return shown + " is negative; give a number >= 0";
            (void)(is_unsigned ? static_cast<long long>(std::strtoull(text.c_str(), &end, 0))
                               : std::strtoll(text.c_str(), &end, 0));
            if (end != text.c_str() + text.size()) return shown + " is not an integer";
            if (errno == ERANGE) return shown + " is past the largest integer this flag holds";
            return std::string();
          }
          const double value = std::strtod(text.c_str(), &end);
          if (end != text.c_str() + text.size()) return shown + " is not a number";
          if (!std::isfinite(value)) return shown + " is not a finite number";
          return std::string();
        },
        std::string()));
  }
}

namespace detail {
inline bool& standard_output_was_closed() {
  static bool closed = false;
  return closed;
}

// At exit: output that standard output did not take is a failure, as coreutils treat it.
inline void check_standard_output_at_exit() {
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  struct stat status {};
  const bool lost_to_closed =
      standard_output_was_closed() && ::fstat(1, &status) == 0 && status.st_size > 0;
  if (flushed && !std::ferror(stdout) && std::cout.good() && !lost_to_closed) return;
  const char* why = lost_to_closed ? "it is closed"
                    : !flushed     ? std::strerror(error)
                                   : "a write failed (is its reader gone?)";
  std::fprintf(stderr, "cannot write standard output: %s; its output was lost\n", why);
  std::fflush(stderr);
  ::_exit(kExitFailure);
}
}  // namespace detail

// Makes a lost standard output a failure (exit 1 with one line on stderr) instead of a silent
// success: a write to a pipe whose reader left (`| head -1`) fails with EPIPE instead of killing
// the program (SIGPIPE is ignored), so every output file is still written; a standard output
// closed at the start (`>&-`) is held by an unlinked temporary file, so that no output file the
// program opens takes its descriptor, and what was printed into it counts as lost. Checked at
// exit. Called once by parse_command_line.
inline void guard_standard_output() {
  static bool guarded = false;
  if (guarded) return;
  guarded = true;
  std::signal(SIGPIPE, SIG_IGN);
  if (::fcntl(1, F_GETFD) < 0 && errno == EBADF) {
    if (std::FILE* held = std::tmpfile()) {
      ::dup2(::fileno(held), 1);
      detail::standard_output_was_closed() = true;
    }
  }
  std::atexit(detail::check_standard_output_at_exit);
}

// Parses the command line into `app`. Returns nothing when the program should go on, otherwise
// the code to exit with: kExitOk after --help (printed), kExitBadInput after a bad flag or value,
// reported as one line on stderr that names it and points to --help.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  guard_standard_output();
  try {
    check_flag_values(app);
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
