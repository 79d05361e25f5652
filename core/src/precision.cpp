#include "gpipe/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>

#include <set>
#include <unordered_set>

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

namespace {

using torch::autograd::Node;

bool makes_fp32(const Node& node) {
  for (uint32_t i = 0; i < node.num_inputs(); ++i) {
    if (node.input_metadata(i).dtype() == caffe2::TypeMeta::Make<float>()) return true;
  }
  return false;
}

// An op's name without autograd's "Backward<n>" suffix.
std::string op_name(const Node& node) {
  auto name = node.name();
  const auto at = name.rfind("Backward");
  return at == std::string::npos || at == 0 ? name : name.substr(0, at);
}

}  // namespace

std::vector<std::string> fp32_source_ops(const torch::Tensor& output) {
  if (!output.defined() || output.scalar_type() != torch::kFloat || !output.grad_fn()) return {};
  std::set<std::string> found;
  std::unordered_set<const Node*> seen;
  std::vector<std::pair<const Node*, const Node*>> stack{{output.grad_fn().get(), nullptr}};
  while (!stack.empty()) {
    const auto [node, consumer] = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second || !makes_fp32(*node)) continue;
    bool fed_lower = false, fed_from_graph = false;
    for (const auto& edge : node->next_edges()) {
      if (!edge.function || edge.function->num_inputs() == 0) continue;
      if (edge.function->next_edges().empty()) continue;  // a leaf's gradient accumulator
      fed_from_graph = true;
      const auto dtype = edge.function->input_metadata(edge.input_nr).dtype();
      if (dtype == caffe2::TypeMeta::Make<float>()) {
        stack.emplace_back(edge.function.get(), node);
      } else if (dtype == caffe2::TypeMeta::Make<c10::BFloat16>() ||
                 dtype == caffe2::TypeMeta::Make<c10::Half>()) {
        fed_lower = true;
      }
    }
    if (!fed_lower && fed_from_graph) continue;
    const bool is_cast = op_name(*node).rfind("ToCopy", 0) == 0;
    found.insert(op_name(is_cast && consumer != nullptr ? *consumer : *node));
  }
  return {found.begin(), found.end()};
}

}  // namespace gpipe
