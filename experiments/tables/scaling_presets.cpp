// The scaling tables' presets and the paper's figures they are compared with (declared in
// scaling.h).
#include "gpipe/errors.h"
#include "tables/paper_figures.h"
#include "tables/scaling.h"

namespace gpipe::tables {
namespace {

models::ModelConfig amoebanet(int64_t layers, int64_t filters, int64_t image_size,
                              int64_t classes) {
  models::ModelConfig c("amoebanet-d");
  c.amoebanet().layers(layers).filters(filters).image_size(image_size).channels(3).classes(classes);
  return c;
}

models::ModelConfig transformer(int64_t layers, int64_t d_model, int64_t ffn, int64_t heads,
                                int64_t vocab, int64_t seq_len) {
  models::ModelConfig c("transformer-l");
  c.transformer().layers(layers).d_model(d_model).ffn(ffn).heads(heads).vocab(vocab).seq_len(
      seq_len);
  return c;
}

}  // namespace

std::optional<double> paper_speedup(const std::string& table, const std::string& model, int64_t K,
                                    int64_t M) {
  if (table == "table3") return M == 32 ? paper_table3_speedup(model, K) : std::nullopt;
  return paper_table2_speedup(model, K, M);
}

const std::vector<std::string>& scaling_preset_names() {
  static const std::vector<std::string> names = {"quick", "paper"};
  return names;
}

ScalingOptions scaling_preset(const std::string& name) {
  ScalingOptions options;
  options.preset = name;
  ScalingTableSpec table2;
  table2.id = "table2";
  table2.title = "Table 2: normalised training throughput, K partitions and M micro-batches";
  table2.paper_hardware = paper_table2_hardware();
  table2.partitions = {2, 4, 8};
  table2.chunks = {1, 4, 32};
  table2.link = "tpu";
  table2.base_K = 2;
  table2.base_M = 1;
  ScalingTableSpec table3;
  table3.id = "table3";
  table3.title = "Table 3: normalised training throughput at M=32 without NVLink (PCIe link)";
  table3.paper_hardware = paper_table3_hardware();
  table3.partitions = {2, 4, 8};
  table3.chunks = {32};
  table3.link = "pcie-scaled";
  table3.base_K = 2;
  table3.base_M = 32;
  if (name == "quick") {
    // Scaled down to run on two CPU cores in minutes, and deep enough (32 and 34 layers) that
    // K=8 balances, as the paper's 18-cell AmoebaNet and 24-48 layer Transformers do; narrow, so
    // a step stays seconds. Each micro-batch of N/32 still costs about what a large one does per
    // sample (measured here: AmoebaNet 22, 19 and 27 ms per sample at micro-batch 256, 64 and 8).
    // A narrower Transformer (d=128, seq 128) ran its K=2, M=32 step 49% slower than its one-
    // thread profile predicts, so the projections would flatter it; d=256 keeps that within 7%.
    const ScalingModel amoeba{"AmoebaNet-D (L=26, D=16), 128x128 images",
                              amoebanet(26, 16, 128, 10), 256};
    const ScalingModel lm{"Transformer-L (L=32, d=256, ffn=1024, seq 64)",
                          transformer(32, 256, 1024, 4, 2048, 64), 64};
    table2.models = {amoeba, lm};
    table3.models = {amoeba, lm};
    // The paper's M = 1, 4, 32 and the M between, for the bubble against M (step_breakdown).
    table2.chunks = {1, 2, 4, 8, 16, 32};
  } else if (name == "paper") {
    table2.models = {{"AmoebaNet-D (18, 256), 224x224 images", amoebanet(18, 256, 224, 1000), 128},
                     {"Transformer-48 (d=2048, ffn=8192, 32 heads, seq 1024)",
                      transformer(48, 2048, 8192, 32, 32000, 1024), 32}};
    table3.models = {{"AmoebaNet-D (18, 128), 224x224 images", amoebanet(18, 128, 224, 1000), 128},
                     {"Transformer-24 (d=2048, ffn=8192, 32 heads, seq 1024)",
                      transformer(24, 2048, 8192, 32, 32000, 1024), 32}};
  } else {
    throw ConfigError(c10::str("unknown preset '", name, "': expected quick or paper"));
  }
  options.tables = {table2, table3};
  return options;
}

}  // namespace gpipe::tables
