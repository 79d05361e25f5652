// The paper's own figures for Tables 1, 2 and 3, to print beside ours.
//
// Why this file exists: every table driver prints GPipe's published figure next to the one this
// engine produced, and those reference values must live in one place, labelled as the paper's
// and with the hardware they were measured on. They are the only hard-coded figures of the
// drivers. Source: Huang et al., "GPipe: Efficient Training of Giant Neural Networks using
// Pipeline Parallelism", arXiv 1811.06965v5, Section 3 (checked against the paper's text).
//
//   Table 1  largest model that fits: AmoebaNet-D on 8 GB accelerators (naive-1, pipeline-1/2/4/8,
//            image 224, mini-batch 128), Transformer-L on 16 GB Cloud TPU v3 cores (naive-1,
//            pipeline-1/8/32/128; d_model 2048, ffn 8192, 32 heads, vocab 32k, seq 1024, batch 32)
//   Table 2  throughput normalised to K=2, M=1 on TPU (v3): AmoebaNet-D (18, 256), Transformer-48
//   Table 3  throughput normalised to K=2 at M=32 on P100 GPUs without NVLink (PCIe):
//            AmoebaNet-D (18, 128), Transformer-24
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpipe::tables {

// The two models of Tables 1-3 (amoebanet-d, transformer-l; the registry's in_paper_tables).
bool is_paper_model(const std::string& model);
std::vector<std::string> paper_models();
// Throws ConfigError naming `flag`, the model and the paper's models unless is_paper_model.
void check_paper_model(const std::string& flag, const std::string& model);
// Of the AmoebaNet family: its sizes are (L, D) (a size search grows D as well as L) and its
// paper figures are AmoebaNet-D's. Throws ConfigError for an unknown model.
bool is_amoebanet(const std::string& model);

// Table 2 (TPU): the paper's normalised throughput at (K, M), K in {2, 4, 8}, M in {1, 4, 32};
// nullopt for any other (model, K, M).
std::optional<double> paper_table2_speedup(const std::string& model, int64_t K, int64_t M);

// Table 3 (GPUs without NVLink, M = 32): the paper's normalised throughput at K in {2, 4, 8}.
std::optional<double> paper_table3_speedup(const std::string& model, int64_t K);

// One column of Table 1.
struct PaperMaxModel {
  std::string config;  // "naive-1", "pipeline-K"
  int64_t partitions = 1;
  std::string size;          // "(18, 208)" for AmoebaNet-D (L, D); "3" for Transformer-L layers
  double parameters = 0;     // as printed: 82M -> 82e6
  double parameter_gb = 0;   // "Total Model Parameter Memory", GB as printed
  double activation_gb = 0;  // "Peak Activation Memory", GB as printed
};

// Table 1's columns for `model`, in the paper's order. AmoebaNet-D: naive-1, pipeline-1/2/4/8 on
// 8 GB accelerators. Transformer-L: naive-1, pipeline-1/8/32/128 on 16 GB TPU v3 cores.
const std::vector<PaperMaxModel>& paper_table1(const std::string& model);

// The paper's Table 1 column of `model` for `config` ("pipeline-8"), if it has one.
std::optional<PaperMaxModel> paper_table1_entry(const std::string& model,
                                                const std::string& config);

// Per-device memory of Table 1's hardware for `model`, in bytes (8 GB / 16 GB).
int64_t paper_table1_device_bytes(const std::string& model);

// Labels naming where the paper's figures were measured, for table captions.
std::string paper_table2_hardware();  // "TPUs", as the paper says (no version)
std::string paper_table3_hardware();  // "P100 GPUs without NVLink (PCIe)"
std::string paper_table1_hardware(const std::string& model);

}  // namespace gpipe::tables
