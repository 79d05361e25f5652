#include "gpipe/activations.h"

#include "gpipe/errors.h"

namespace gpipe {

int64_t batch_size(const Activations& activations) {
  int64_t size = -1;
  for (size_t i = 0; i < activations.size(); ++i) {
    const auto& t = activations[i];
    if (!t.defined() || t.dim() == 0) continue;
    GPIPE_CHECK(size < 0 || t.size(0) == size, InputError, "activation ", i, " has batch size ",
                t.size(0), " but earlier tensors have ", size,
                "; every tensor crossing a stage boundary must share dim 0");
    size = t.size(0);
  }
  GPIPE_CHECK(size >= 0, InputError, "activations hold no tensor with a batch dimension (",
              activations.size(), " tensors)");
  return size;
}

Activations detach_for_stage(const Activations& activations, const torch::Device& device,
                             bool requires_grad) {
  Activations out;
  out.reserve(activations.size());
  for (const auto& t : activations) {
    if (!t.defined()) {
      out.emplace_back();
      continue;
    }
    auto d = t.device() == device ? t.detach() : t.detach().to(device, /*non_blocking=*/true);
    if (requires_grad && d.is_floating_point()) d.requires_grad_(true);
    out.push_back(std::move(d));
  }
  return out;
}

Activations to_device(const Activations& activations, const torch::Device& device) {
  Activations out;
  out.reserve(activations.size());
  for (const auto& t : activations) {
    out.push_back(!t.defined() || t.device() == device ? t : t.to(device, /*non_blocking=*/true));
  }
  return out;
}

int64_t nbytes(const Activations& activations) {
  int64_t total = 0;
  for (const auto& t : activations) {
    if (t.defined()) total += static_cast<int64_t>(t.numel() * t.element_size());
  }
  return total;
}

}  // namespace gpipe
