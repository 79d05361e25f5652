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

namespace gpipe::cli {
namespace {

template <typename T, typename Convert>
std::vector<T> parse_list(const std::string& text, const std::string& flag, Convert convert) {
  std::vector<T> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    GPIPE_CHECK(!item.empty(), ConfigError, flag, ": an empty item in '", text,
                "' (write the values separated by single commas)");
    size_t used = 0;
    T value{};
    try {
      value = convert(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GPIPE_CHECK(used == item.size(), ConfigError, flag, ": '", item, "' in '", text,
                "' is not a number");
    values.push_back(value);
  }
  GPIPE_CHECK(!values.empty(), ConfigError, flag, ": no values in '", text, "'");
  return values;
}

}  // namespace

std::vector<double> parse_doubles(const std::string& text, const std::string& flag) {
  return parse_list<double>(text, flag,
                            [](const std::string& s, size_t* used) { return std::stod(s, used); });
}

std::vector<int64_t> parse_ints(const std::string& text, const std::string& flag) {
  return parse_list<int64_t>(
      text, flag, [](const std::string& s, size_t* used) { return std::stoll(s, used); });
}

std::vector<std::string> parse_strings(const std::string& text, char separator) {
  std::vector<std::string> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, separator)) {
    if (!item.empty()) values.push_back(item);
  }
  return values;
}

void check_config_file(const CLI::App& app, const std::string& path) {
  std::ifstream in(path);
  if (!in) return;  // CLI11 names a file it cannot read
  auto trim = [](std::string text) {
    const auto first = text.find_first_not_of(" \t\r");
    const auto last = text.find_last_not_of(" \t\r");
    return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  };
  std::map<std::string, int> first_line;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
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

CLI::Validator finite_range(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        double value = 0;
        size_t used = 0;
        try {
          value = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || text.empty()) return "'" + text + "' is not a number";
        if (!std::isfinite(value) || value < low || value > high)
          return c10::str(text, " is not a finite number in [", low, ", ", high, "]");
        return std::string();
      },
      c10::str("FINITE in [", low, ", ", high, "]"));
}

void check_output_file(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code error;
  GPIPE_CHECK(!fs::is_directory(path, error), ConfigError, flag, " '", path,
              "' is a folder; give a file name");
  const auto parent =
      fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  GPIPE_CHECK(fs::is_directory(parent, error), ConfigError, flag, " '", path, "': the folder '",
              parent.string(), "' does not exist; create it first");
  GPIPE_CHECK(::access(parent.c_str(), W_OK) == 0, ConfigError, flag, " '", path, "': the folder '",
              parent.string(), "' is not writable");
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
