// Lists and numbers in text: the one reading of every list and number the command line and the
// plan keys take ("1,2.5,3", "cpu:0,cpu:1", "K=2,M=4").
//
// Why this file exists: the shape and the reports read such text below the command-line layer
// (parse_shape, a report's sizes), and that layer's CLI11 has no place there; the command line's
// validators (cli.h) check values with these same functions, so a value reads the same wherever
// it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::cli {

// The number `text` starts with, as std::stod reads it, with in `used` how many characters it
// took: 0 (and 0 returned) when it starts with none or the number is out of a double's range.
// The one reading of a number for every list, range and size of the command line.
double leading_number(const std::string& text, size_t* used);
// "1,2.5,3" -> {1, 2.5, 3}. Throws ConfigError naming `flag` and the bad or empty item.
std::vector<double> parse_doubles(const std::string& text, const std::string& flag);
std::vector<int64_t> parse_ints(const std::string& text, const std::string& flag);
std::vector<std::string> parse_strings(const std::string& text, char separator = ',');
// As parse_strings, but an empty item ("a,,b", ",") or an empty list is a ConfigError naming
// `flag` (left out when empty).
std::vector<std::string> parse_names(const std::string& text, const std::string& flag);

}  // namespace gpipe::cli
