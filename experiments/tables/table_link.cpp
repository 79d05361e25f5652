#include "tables/table_link.h"

#include <chrono>

#include "costs/layer_costs.h"
#include "gpipe/errors.h"
#include "gpipe/timing.h"

namespace gpipe::tables {

bool is_scaled_link(const std::string& name) {
  return name == "pcie-scaled" || name == "tpu-scaled";
}

void check_table_link(const std::string& name) {
  if (is_scaled_link(name)) return;
  try {
    link_preset(name);
  } catch (const ConfigError&) {
    throw ConfigError(c10::str("unknown link '", name,
                               "': expected pcie, nvlink, tpu, none, pcie-scaled or tpu-scaled"));
  }
}

TableLink table_link(const std::string& name, double machine_flops) {
  check_table_link(name);
  TableLink out;
  out.name = name;
  if (!is_scaled_link(name)) {
    out.link = link_preset(name);
    return out;
  }
  GPIPE_CHECK(machine_flops > 0, ConfigError, "the ", name,
              " link needs this machine's compute rate (> 0 FLOP/s), got ", machine_flops);
  const bool pcie = name == "pcie-scaled";
  out.accelerator = pcie ? "P100 (9.3 TFLOPS fp32)" : "TPU v3 core (61.5 TFLOPS bf16)";
  out.accelerator_flops = pcie ? 9.3e12 : 61.5e12;
  out.machine_flops = machine_flops;
  out.factor = machine_flops / out.accelerator_flops;
  out.link = link_preset(pcie ? "pcie" : "tpu").scaled(out.factor);
  return out;
}

double measure_gemm_flops(const DeviceSpec& device, int threads) {
  constexpr int64_t n = 512;
  std::vector<double> ms;
  DeviceWorker worker(device, threads);
  worker.run([&] {
    torch::NoGradGuard no_grad;
    const auto on = torch::TensorOptions().device(device.torch_device());
    const auto a = torch::randn({n, n}, on);
    const auto b = torch::randn({n, n}, on);
    auto c = torch::empty({n, n}, on);
    for (int i = 0; i < 3; ++i)
      torch::mm_out(c, a, b);
    costs::synchronize(device);
    for (int i = 0; i < 15; ++i) {
      const auto start = std::chrono::steady_clock::now();
      torch::mm_out(c, a, b);
      costs::synchronize(device);
      ms.push_back(elapsed_ms(start));
    }
  });
  return 2.0 * n * n * n / (median(ms) / 1e3);
}

}  // namespace gpipe::tables
