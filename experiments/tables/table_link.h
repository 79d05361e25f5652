// The links between the devices of a projected table: real presets, or scaled to this machine.
//
// Why this file exists: a projected Table 2 or 3 column (costs/projection.h) needs a link between
// its stages. The presets of link.h keep real link speeds, but beside this machine's far slower
// compute they make communication look free; the scaled links shrink a link by this machine's
// compute rate over the accelerator's, so a copy costs the share of a step here that it costs
// there.
#pragma once

#include <string>

#include "gpipe/device.h"
#include "gpipe/link.h"

namespace gpipe::tables {

// A link of the tables: a preset of link.h (pcie, nvlink, tpu, none), or pcie-scaled /
// tpu-scaled, that link scaled (LinkModel::scaled) by this machine's compute rate over the
// accelerator's (the paper's P100: 9.3 TFLOPS fp32; a TPU v3 core: 61.5 TFLOPS bf16).
struct TableLink {
  std::string name;
  LinkModel link;     // in seconds
  double factor = 1;  // this machine's FLOP/s over the accelerator's; 1 when not scaled
  double machine_flops = 0;
  double accelerator_flops = 0;  // 0 when not scaled
  std::string accelerator;
  bool scaled() const { return accelerator_flops > 0; }
};
// Whether `name` is pcie-scaled or tpu-scaled.
bool is_scaled_link(const std::string& name);
// Throws ConfigError naming the links for an unknown name.
void check_table_link(const std::string& name);
// The link `name`; a scaled one uses `machine_flops` (> 0; measure_gemm_flops).
TableLink table_link(const std::string& name, double machine_flops);
// The fp32 GEMM rate of `device` (on `threads` intra-op threads for a CPU device), in FLOP/s:
// the median of timed 512x512 products on a device worker, as the per-layer profiles run.
double measure_gemm_flops(const DeviceSpec& device, int threads);

}  // namespace gpipe::tables
