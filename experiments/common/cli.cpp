#include "cli.h"

#include <c10/util/Exception.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gpipe/errors.h"
#include "gpipe/files.h"

namespace gpipe::cli {

void check_config_file(const CLI::App& app, const std::string& path) {
  GPIPE_CHECK(!path.empty(), ConfigError,
              "--config: an empty file name (CLI11 would read no file); give a TOML file of flags");
  std::error_code missing;
  if (!std::filesystem::exists(path, missing)) return;  // CLI11 names a file it cannot find
  // A FIFO or a device is refused here, before CLI11 would block reading it.
  std::istringstream in(read_file(path, "--config", 1 << 24));
  auto trim = [](std::string text) {
    const auto first = text.find_first_not_of(" \t\r");
    const auto last = text.find_last_not_of(" \t\r");
    return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  };
  std::map<std::string, int> first_line;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    // CLI11 reports a binary file as "INI was not able to parse", naming neither file nor line.
    GPIPE_CHECK(line.find('\0') == std::string::npos, ConfigError, path, ":", number,
                ": a NUL byte; this is not a TOML file of flags");
    const auto text = trim(line);
    const auto eq = text.find('=');
    if (text.empty() || text[0] == '#' || text[0] == '[' || eq == std::string::npos) continue;
    const auto key = trim(text.substr(0, eq)), value = trim(text.substr(eq + 1));
    const auto where = c10::str(path, ":", number, ": ");
    const auto [seen, inserted] = first_line.emplace(key, number);
    GPIPE_CHECK(inserted, ConfigError, where, "'", key, "' is given twice (first on line ",
                seen->second, ")");
    const auto* option = app.get_option_no_throw("--" + key);
    GPIPE_CHECK(value.empty() || value[0] != '[' || option == nullptr ||
                    option->get_items_expected_max() > 1,
                ConfigError, where, "'", key, "' takes one value, not the list ", value);
  }
}

void check_config_files(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) check_config_file(app, argv[i + 1]);
    if (arg.rfind("--config=", 0) == 0) check_config_file(app, arg.substr(9));
  }
}

CLI::Validator finite_range(double low, double high, Interval interval) {
  const char* open = interval == Interval::kOpenLow ? "(" : "[";
  const char* close = interval == Interval::kOpenHigh ? ")" : "]";
  const std::string range = c10::str(open, low, ", ", high, close);
  return CLI::Validator(
      [low, high, interval, range](std::string& text) -> std::string {
        size_t used = 0;
        const double value = leading_number(text, &used);
        if (used != text.size() || text.empty()) return "'" + printable(text) + "' is not a number";
        const bool inside = value >= low && value <= high &&
                            !(interval == Interval::kOpenLow && value == low) &&
                            !(interval == Interval::kOpenHigh && value == high);
        if (!std::isfinite(value) || !inside)
          return c10::str(text, " is not a finite number in ", range);
        return std::string();
      },
      "FINITE in " + range);
}

CLI::Validator int_list(int64_t low, int64_t high, bool allow_empty) {
  return parsed_by([low, high, allow_empty](const std::string& text) {
    if (allow_empty && text.empty()) return;
    for (const int64_t value : parse_ints(text, "")) {
      GPIPE_CHECK(value >= low && value <= high, ConfigError, value, " in '", text, "' is not in [",
                  low, ", ", high, "]");
    }
  });
}

CLI::Validator name_list(std::function<void(const std::string&)> check) {
  return parsed_by([check = std::move(check)](const std::string& text) {
    for (const auto& name : parse_names(text, ""))
      check(name);
  });
}

CLI::Validator output_file() {
  return parsed_by([](const std::string& path) { check_output_file(path, ""); });
}

CLI::Validator output_folder(bool allow_empty) {
  return parsed_by([allow_empty](const std::string& path) {
    if (!allow_empty || !path.empty()) check_output_folder(path, "");
  });
}

CLI::Option* add_log_level_flag(CLI::App& app, std::string& level) {
  return app.add_option("--log-level", level, "debug | info | warn | error")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
}

CLI::Option* add_precision_flag(CLI::App& app, Precision& precision, const std::string& help) {
  return app
      .add_option_function<std::string>(
          "--precision",
          [&precision](const std::string& text) { precision = parse_precision(text); }, help)
      ->default_str(to_string(precision))
      ->check(parsed_by([](const std::string& name) { parse_precision(name); }));
}

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("gpipe");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::from_str(level));
}

int run_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  // A write past the file-size limit (ulimit -f) then fails with EFBIG and is reported like a
  // full disk, instead of SIGXFSZ killing the process in the middle of a snapshot.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    check_config_files(app, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", error_message(e).c_str());
    return kExitBadInput;
  }
  if (const auto code = parse_command_line(app, argc, argv)) return *code;
  if (!spdlog::get("gpipe")) setup_logging();
  try {
    return body();
  } catch (const CLI::Error& e) {  // a preset or config file the parser rejects
    spdlog::error("{}", error_message(e));
    return kExitBadInput;
  } catch (const std::exception& e) {
    spdlog::error("{}", error_message(e));
    return exit_code_for(e);
  }
}

std::string command_line(int argc, char** argv) {
  std::string text = argc > 0 ? std::string(argv[0]) : std::string();
  text = text.substr(text.find_last_of('/') + 1);
  for (int i = 1; i < argc; ++i) {
    // Quoted for a shell when it is empty or holds anything but the usual flag characters.
    const std::string arg = argv[i];
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789_./:=,+-@%") == std::string::npos;
    std::string quoted = "'";
    for (const char c : arg)
      quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    text += " " + (plain ? arg : quoted + "'");
  }
  return text;
}

}  // namespace gpipe::cli
