// Text output shared by the drivers: Markdown and CSV tables, number and byte formatting.
//
// Why this file exists: scaling_table and max_model_size print a table to the terminal and write
// it as Markdown and CSV beside their JSON; they, gpipe_plan and the trainer print sizes and
// times the same way. One small table type and one set of formatters keep every driver's output
// consistent, and make the formatting unit-testable.
#pragma once

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace gpipe {

// A table of strings with a header row; columns are right-aligned in Markdown when `numeric`.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header, std::vector<bool> numeric = {});

  // Throws ConfigError when the row's width differs from the header's.
  void add_row(std::vector<std::string> row);

  // GitHub Markdown: | a | b |, |---|---:|, one line per row.
  std::string markdown() const;
  // RFC 4180 CSV: fields with a comma, quote or newline are quoted, quotes doubled.
  std::string csv() const;

  size_t size() const { return rows_.size(); }
  const std::vector<std::string>& header() const { return header_; }
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }

 private:
  std::vector<std::string> header_;
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> rows_;
};

// "3.14" with `digits` decimals.
std::string fixed(double value, int digits);
// fixed(*value) or "-" when absent.
std::string fixed_or_dash(const std::optional<double>& value, int digits);
// Binary units: 1536 -> "1.50 KiB", 3 << 30 -> "3.00 GiB"; bytes below 1 KiB as "512 B".
std::string format_bytes(double bytes);
// Parameter counts as the paper prints them: 82e6 -> "82.0M", 1.8e9 -> "1.80B", 950 -> "950".
std::string format_count(double count);
// Parses "8GiB", "512MiB", "1.5G", "300M", "4096" (bytes); K/M/G/T are binary (KiB...), case
// insensitive, optional "iB"/"B". Throws ConfigError naming `flag` for anything else or <= 0.
int64_t parse_bytes(const std::string& text, const std::string& flag);

// The 1, 5 and 15 minute load averages as a JSON array (null when unknown), and as "0.52, 1.10,
// 1.30" for a report. Timings taken while other work shares the cores are slower; every report
// records the load around its run.
nlohmann::json load_average();
std::string format_load(const nlohmann::json& load);

// What decides a run's arithmetic besides its code and seed, recorded beside its figures: the
// CPU model and its vector extensions, the LibTorch version, the BLAS and oneDNN it was built
// with, the CPU capability ATen dispatches to, and the environment variables that override
// those (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, OPENBLAS_CORETYPE, ...). Two runs that agree
// on all of it train bit for bit alike; kernels that sum in another order do not.
nlohmann::json arithmetic_environment();

// Writes `text` to `path` (through a temporary file and a rename); creates missing parent
// folders. Throws Error naming the path.
void write_text_file(const std::string& path, const std::string& text);

// What both table drivers do with a finished table: print its Markdown, write PREFIX.md,
// PREFIX.csv and PREFIX.json unless `prefix` is empty, and the JSON alone to `json_path` unless
// that is empty. `Result` has to_markdown/to_csv/to_json overloads and a `seconds` field.
template <typename Result>
void publish(const Result& result, const std::string& prefix, const std::string& json_path) {
  const auto json = to_json(result).dump(2) + "\n";
  const auto markdown = to_markdown(result);
  std::cout << markdown << std::flush;
  if (!prefix.empty()) {
    write_text_file(prefix + ".md", markdown);
    write_text_file(prefix + ".csv", to_csv(result));
    write_text_file(prefix + ".json", json);
    spdlog::info("wrote {0}.md, {0}.csv and {0}.json in {1:.1f} min", prefix, result.seconds / 60);
  }
  if (!json_path.empty()) write_text_file(json_path, json);
}

}  // namespace gpipe
