#include "tables/paper_figures.h"

#include <array>

#include <c10/util/StringUtil.h>

#include "gpipe/errors.h"
#include "gpipe/models/registry.h"

namespace gpipe::tables {
namespace {

constexpr std::array<int64_t, 3> kPaperK = {2, 4, 8};
constexpr std::array<int64_t, 3> kPaperM = {1, 4, 32};

// Table 2, rows M = 1, 4, 32; columns K = 2, 4, 8 (the paper's layout).
constexpr double kTable2AmoebaNet[3][3] = {{1, 1.13, 1.38}, {1.07, 1.26, 1.72}, {1.21, 1.84, 3.48}};
constexpr double kTable2Transformer[3][3] = {{1, 1.07, 1.3}, {1.7, 3.2, 4.8}, {1.8, 3.4, 6.3}};
// Table 3, M = 32; columns K = 2, 4, 8.
constexpr double kTable3AmoebaNet[3] = {1, 1.7, 2.7};
constexpr double kTable3Transformer[3] = {1, 1.8, 3.3};

std::optional<size_t> index_of(const std::array<int64_t, 3>& values, int64_t value) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == value) return i;
  }
  return std::nullopt;
}

}  // namespace

bool is_amoebanet(const std::string& model) {
  return models::model_entry(model).family == models::ModelFamily::kAmoebaNet;
}

bool is_paper_model(const std::string& model) {
  const auto* entry = models::find_model(model);
  return entry != nullptr && entry->in_paper_tables;
}

std::vector<std::string> paper_models() {
  std::vector<std::string> names;
  for (const auto& entry : models::model_entries()) {
    if (entry.in_paper_tables) names.push_back(entry.name);
  }
  return names;
}

void check_paper_model(const std::string& flag, const std::string& model) {
  GPIPE_CHECK(is_paper_model(model), ConfigError, flag.empty() ? "" : flag + ": ", "'", model,
              "' is not one of ", c10::Join(" or ", paper_models()),
              ", the models of the paper's Tables 1-3");
}

std::optional<double> paper_table2_speedup(const std::string& model, int64_t K, int64_t M) {
  const auto k = index_of(kPaperK, K);
  const auto m = index_of(kPaperM, M);
  if (!k || !m || !is_paper_model(model)) return std::nullopt;
  return is_amoebanet(model) ? kTable2AmoebaNet[*m][*k] : kTable2Transformer[*m][*k];
}

std::optional<double> paper_table3_speedup(const std::string& model, int64_t K) {
  const auto k = index_of(kPaperK, K);
  if (!k || !is_paper_model(model)) return std::nullopt;
  return is_amoebanet(model) ? kTable3AmoebaNet[*k] : kTable3Transformer[*k];
}

const std::vector<PaperMaxModel>& paper_table1(const std::string& model) {
  static const std::vector<PaperMaxModel> amoebanet = {
      {"naive-1", 1, "(18, 208)", 82e6, 1.05, 6.26},
      {"pipeline-1", 1, "(18, 416)", 318e6, 3.8, 3.46},
      {"pipeline-2", 2, "(18, 544)", 542e6, 6.45, 8.11},
      {"pipeline-4", 4, "(36, 544)", 1.05e9, 12.53, 15.21},
      {"pipeline-8", 8, "(72, 512)", 1.8e9, 24.62, 26.24},
  };
  static const std::vector<PaperMaxModel> transformer = {
      {"naive-1", 1, "3", 282.2e6, 11.7, 3.15},
      {"pipeline-1", 1, "13", 785.8e6, 8.8, 6.4},
      {"pipeline-8", 8, "103", 5.3e9, 59.5, 50.9},
      {"pipeline-32", 32, "415", 21.0e9, 235.1, 199.9},
      {"pipeline-128", 128, "1663", 83.9e9, 937.9, 796.1},
  };
  static const std::vector<PaperMaxModel> none;
  if (!is_paper_model(model)) return none;
  return is_amoebanet(model) ? amoebanet : transformer;
}

std::optional<PaperMaxModel> paper_table1_entry(const std::string& model,
                                                const std::string& config) {
  for (const auto& entry : paper_table1(model)) {
    if (entry.config == config) return entry;
  }
  return std::nullopt;
}

int64_t paper_table1_device_bytes(const std::string& model) {
  return is_amoebanet(model) ? int64_t{8} << 30 : int64_t{16} << 30;
}

std::string paper_table2_hardware() {
  return "TPUs";
}

std::string paper_table3_hardware() {
  return "P100 GPUs without NVLink (PCIe)";
}

std::string paper_table1_hardware(const std::string& model) {
  return is_amoebanet(model) ? "8 GB accelerators" : "Cloud TPU v3, 16 GB per core";
}

}  // namespace gpipe::tables
