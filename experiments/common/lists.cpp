#include "common/lists.h"

#include <cmath>
#include <sstream>

#include "gpipe/errors.h"

namespace gpipe::cli {
namespace {

std::string prefix(const std::string& flag) {
  return flag.empty() ? std::string() : flag + ": ";
}

template <typename T, typename Convert>
std::vector<T> parse_list(const std::string& text, const std::string& flag, Convert convert) {
  std::vector<T> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    GPIPE_CHECK(!item.empty(), ConfigError, prefix(flag), "an empty item in '", text,
                "' (write the values separated by single commas)");
    size_t used = 0;
    T value{};
    try {
      value = convert(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GPIPE_CHECK(used == item.size(), ConfigError, prefix(flag), "'", item, "' in '", text,
                "' is not a number");
    values.push_back(value);
  }
  GPIPE_CHECK(!values.empty(), ConfigError, prefix(flag), "no values in '", text, "'");
  return values;
}

}  // namespace

double leading_number(const std::string& text, size_t* used) {
  try {
    return std::stod(text, used);
  } catch (const std::exception&) {
    *used = 0;
    return 0;
  }
}

std::vector<double> parse_doubles(const std::string& text, const std::string& flag) {
  auto values = parse_list<double>(text, flag, leading_number);
  for (const double value : values) {
    GPIPE_CHECK(std::isfinite(value), ConfigError, prefix(flag), value, " in '", text,
                "' is not a finite number");
  }
  return values;
}

std::vector<int64_t> parse_ints(const std::string& text, const std::string& flag) {
  return parse_list<int64_t>(
      text, flag, [](const std::string& s, size_t* used) { return std::stoll(s, used); });
}

std::vector<std::string> parse_names(const std::string& text, const std::string& flag) {
  std::vector<std::string> names;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    GPIPE_CHECK(!item.empty(), ConfigError, prefix(flag), "an empty item in '", text,
                "' (write the names separated by single commas)");
    names.push_back(item);
  }
  GPIPE_CHECK(!names.empty() && text.back() != ',', ConfigError, prefix(flag), "no names in '",
              text, "'");
  return names;
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

}  // namespace gpipe::cli
