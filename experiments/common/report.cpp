#include "common/report.h"

#include <ATen/Version.h>
#include <torch/version.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/files.h"

namespace gpipe {

TextTable::TextTable(std::vector<std::string> header, std::vector<bool> numeric)
    : header_(std::move(header)), numeric_(std::move(numeric)) {
  numeric_.resize(header_.size(), false);
}

void TextTable::add_row(std::vector<std::string> row) {
  GPIPE_CHECK(row.size() == header_.size(), ConfigError, "a table row has ", row.size(),
              " cells but the header has ", header_.size());
  rows_.push_back(std::move(row));
}

std::string TextTable::markdown() const {
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& cells) {
    out << "|";
    for (const auto& cell : cells)
      out << " " << cell << " |";
    out << "\n";
  };
  line(header_);
  out << "|";
  for (bool numeric : numeric_)
    out << (numeric ? "---:|" : "---|");
  out << "\n";
  for (const auto& row : rows_)
    line(row);
  return out.str();
}

std::string TextTable::csv() const {
  std::ostringstream out;
  auto field = [&](const std::string& value) {
    if (value.find_first_of(",\"\n\r") == std::string::npos) {
      out << value;
      return;
    }
    out << '"';
    for (char c : value) {
      if (c == '"') out << '"';
      out << c;
    }
    out << '"';
  };
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) out << ",";
      field(cells[i]);
    }
    out << "\n";
  };
  line(header_);
  for (const auto& row : rows_)
    line(row);
  return out.str();
}

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

std::string fixed_or_dash(const std::optional<double>& value, int digits) {
  return value ? fixed(*value, digits) : "-";
}

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (std::abs(bytes) < 1024) return fixed(bytes, 0) + " B";
  int unit = -1;
  while (std::abs(bytes) >= 1024 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  return fixed(bytes, 2) + " " + kUnits[unit];
}

std::string format_count(double count) {
  if (std::abs(count) >= 1e9) return fixed(count / 1e9, 2) + "B";
  if (std::abs(count) >= 1e6) return fixed(count / 1e6, 1) + "M";
  if (std::abs(count) >= 1e3) return fixed(count / 1e3, 1) + "K";
  return fixed(count, 0);
}

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  const double value = cli::leading_number(text, &used);
  GPIPE_CHECK(used > 0, ConfigError, flag, ": '", text,
              "' is not a size; write e.g. 8GiB, 512MiB or a number of bytes");
  std::string unit = text.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  double scale = 0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else {
    const std::string prefixes = "kmgt";
    const auto p = prefixes.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (p != std::string::npos && (rest.empty() || rest == "b" || rest == "ib")) {
      scale = std::pow(1024.0, static_cast<double>(p + 1));
    }
  }
  GPIPE_CHECK(scale > 0, ConfigError, flag, ": unknown unit '", text.substr(used), "' in '", text,
              "'; use B, KiB, MiB, GiB or TiB");
  const double bytes = value * scale;
  GPIPE_CHECK(std::isfinite(bytes) && bytes >= 1, ConfigError, flag, ": '", text,
              "' must be a positive size");
  // 2^62 bytes (4 EiB) is past any memory; beyond 2^63 the conversion is undefined (fuzz_parsers).
  GPIPE_CHECK(bytes <= 0x1p62, ConfigError, flag, ": '", text, "' is larger than any memory");
  return static_cast<int64_t>(bytes);
}

nlohmann::json load_average() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return nullptr;
  return {load[0], load[1], load[2]};
}

std::string format_load(const nlohmann::json& load) {
  if (!load.is_array()) return "unknown";
  std::string text;
  for (const auto& value : load) {
    if (!text.empty()) text += ", ";
    text += fixed(value.get<double>(), 2);
  }
  return text;
}

namespace {

// "key : value" lines of /proc/cpuinfo: the first value of each wanted key.
std::map<std::string, std::string> cpuinfo(const std::vector<std::string>& keys) {
  std::map<std::string, std::string> found;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (found.size() < keys.size() && std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    auto key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (std::find(keys.begin(), keys.end(), key) != keys.end() && !found.count(key)) {
      found[key] = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    }
  }
  return found;
}

// The lines of at::show_config() that name a kernel library or the dispatch level, and the
// BLAS_INFO / LAPACK_INFO settings of its build line.
std::vector<std::string> kernel_libraries() {
  std::vector<std::string> kept;
  std::istringstream config(at::show_config());
  std::string line;
  while (std::getline(config, line)) {
    const auto start = line.find_first_not_of(" -");
    if (start == std::string::npos) continue;
    line = line.substr(start);
    for (const char* key : {"BLAS_INFO=", "LAPACK_INFO="}) {
      const auto at = line.find(key);
      if (at != std::string::npos) kept.push_back(line.substr(at, line.find(',', at) - at));
    }
    for (const char* name : {"CPU capability", "MKL-DNN", "oneDNN", "OpenMP", "Math Kernel"}) {
      if (line.find(name) != std::string::npos && line.rfind("Build settings", 0) != 0) {
        kept.push_back(line);
        break;
      }
    }
  }
  return kept;
}

}  // namespace

nlohmann::json arithmetic_environment() {
  const auto cpu = cpuinfo({"model name", "flags"});
  auto flags = nlohmann::json::array();
  if (cpu.count("flags")) {
    std::istringstream all(cpu.at("flags"));
    std::set<std::string> present{std::istream_iterator<std::string>(all), {}};
    for (const char* isa : {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni",
                            "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"}) {
      if (present.count(isa)) flags.push_back(isa);
    }
  }
  auto overrides = nlohmann::json::object();
  for (const char* name : {"ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                           "OPENBLAS_CORETYPE", "MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS"}) {
    if (const char* value = std::getenv(name)) overrides[name] = value;
  }
  return {{"cpu_model", cpu.count("model name") ? nlohmann::json(cpu.at("model name")) : nullptr},
          {"cpu_vector_extensions", flags},
          {"libtorch", TORCH_VERSION},
          {"kernel_libraries", kernel_libraries()},
          {"overrides", overrides}};
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) {
    std::error_code error;
    std::filesystem::create_directories(target.parent_path(), error);
    GPIPE_CHECK(!error, Error, "cannot create the folder of '", path, "': ", error.message());
  }
  write_file(path, text);
}

}  // namespace gpipe
