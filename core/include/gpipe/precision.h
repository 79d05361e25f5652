// Precision: the dtype a run computes in, and the one place that turns autocast on.
//
// Why this file exists: GPU pipelines train in bf16 (or fp16 with loss scaling) while the master
// weights, the optimizer, BatchNorm's statistics and the loss stay fp32. A stage computes its
// forward (and a recompute replays it) under autocast for its device's type; what crosses a
// stage boundary is cast to the compute dtype, so messages, stashed boundary activations and
// their gradients are half the size. Backward runs outside autocast, as autograd recorded it.
// LibTorch 1.13 and 2.x name the autocast switches differently (2.x takes the device type); the
// difference lives in precision.cpp only.
//
//   forward of a stage, bf16:   fp32 weights ──cast──► bf16 ops ──► output ──cast──► bf16 message
//   last stage:                 logits ──► fp32 ──► loss (fp32)
#pragma once

#include <torch/torch.h>

#include <string>

#include "gpipe/activations.h"
#include "gpipe/device.h"

namespace gpipe {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32" | "bf16" | "fp16"; anything else is a ConfigError naming the value.
Precision parse_precision(const std::string& name);
std::string to_string(Precision precision);

// The dtype a stage's autocast computes in, and what crosses a boundary (float for fp32).
torch::ScalarType compute_dtype(Precision precision);
// Bytes of one floating-point element of a boundary message.
int64_t element_bytes(Precision precision);
// fp16's range is narrow: its gradients need a loss scaler (loss_scaler.h); bf16's need none.
inline bool needs_loss_scaling(Precision precision) {
  return precision == Precision::kFp16;
}

// Throws ConfigError naming the build and the way out when this LibTorch cannot compute
// `precision` on `device` (fp16 on a CPU under LibTorch 1.13, whose CPU autocast is bf16 only).
void check_precision_supported(Precision precision, const DeviceSpec& device);

// Autocast to `precision` for `device`'s type on this thread, for the guard's lifetime (nothing
// for fp32). On exit it restores the previous state and, leaving the outermost region, clears
// autocast's cache of cast weights, as torch.autocast does.
class AutocastGuard {
 public:
  AutocastGuard(Precision precision, torch::DeviceType device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType device_;
  bool active_ = false;
  bool was_enabled_ = false;
  torch::ScalarType previous_dtype_ = torch::kFloat;
};

// The dtype autocast on this thread computes a floating-point `t` in on its device type: `t`'s own
// dtype where autocast is off (or `t` is not floating point). For custom autograd Functions,
// which must cast their own inputs to be autocast-aware (linear.h, conv.h).
torch::ScalarType autocast_dtype_for(const torch::Tensor& t);

// Each floating-point tensor cast to `dtype` inside the autograd graph (its gradient comes back
// in `dtype` and is cast back); other tensors and tensors already in `dtype` pass unchanged.
Activations cast_floating(const Activations& activations, torch::ScalarType dtype);

// The ops that made `output`'s fp32 values, found in its autograd graph: walking back through
// fp32 results, each op fed a lower-precision tensor (where the op needed fp32 and autocast cast
// its input, the op that took the cast) or fed nothing from the graph (an embedding lookup of
// tokens). Named as autograd names them, without "Backward": "NativeLayerNorm", "Embedding".
// Empty where `output` is not fp32 or has no graph (made under no_grad).
std::vector<std::string> fp32_source_ops(const torch::Tensor& output);

}  // namespace gpipe
