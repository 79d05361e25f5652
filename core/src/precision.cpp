#include "gpipe/precision.h"

#include <ATen/autocast_mode.h>

#include "gpipe/errors.h"

namespace gpipe {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw ConfigError(c10::str("unknown precision '", name, "': expected fp32, bf16 or fp16"));
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

torch::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return torch::kBFloat16;
    case Precision::kFp16:
      return torch::kHalf;
    case Precision::kFp32:
      break;
  }
  return torch::kFloat;
}

int64_t element_bytes(Precision precision) {
  return static_cast<int64_t>(c10::elementSize(compute_dtype(precision)));
}

void check_precision_supported(Precision precision, const DeviceSpec& device) {
#if TORCH_VERSION_MAJOR < 2
  GPIPE_CHECK(precision != Precision::kFp16 || device.is_cuda(), ConfigError,
              "--precision fp16 on ", device.str(), " needs LibTorch 2.x: this build's LibTorch ",
              TORCH_VERSION,
              " autocasts the CPU to bf16 only; use bf16 (no loss scaler needed), "
              "or fp16 on cuda devices or with the 2.x build (scripts/build.sh --torch2)");
#else
  (void)precision;
  (void)device;
#endif
}

// The autocast switches: 2.x takes the device type, 1.13 has one pair of functions per type.
namespace {

bool autocast_enabled(torch::DeviceType device) {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::is_autocast_enabled(device);
#else
  return device == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_autocast(torch::DeviceType device, bool enabled, torch::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == torch::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

torch::ScalarType autocast_dtype(torch::DeviceType device) {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::get_autocast_dtype(device);
#else
  return device == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                                : at::autocast::get_autocast_cpu_dtype();
#endif
}

}  // namespace

torch::ScalarType autocast_dtype_for(const torch::Tensor& t) {
  const auto device = t.device().type();
  if (!t.is_floating_point() || !autocast_enabled(device)) return t.scalar_type();
  return autocast_dtype(device);
}

AutocastGuard::AutocastGuard(Precision precision, torch::DeviceType device) : device_(device) {
  if (precision == Precision::kFp32) return;
  active_ = true;
  was_enabled_ = autocast_enabled(device);
  previous_dtype_ = autocast_dtype(device);
  set_autocast(device, true, compute_dtype(precision));
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(device_, was_enabled_, previous_dtype_);
}

Activations cast_floating(const Activations& activations, torch::ScalarType dtype) {
  Activations out;
  out.reserve(activations.size());
  for (const auto& t : activations) {
    const bool cast = t.defined() && t.is_floating_point() && t.scalar_type() != dtype;
    out.push_back(cast ? t.to(dtype) : t);
  }
  return out;
}

}  // namespace gpipe
