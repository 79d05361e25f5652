// Deterministic dropout and drop-path.
//
// Why this file exists: torch::nn::Dropout draws from the global generator, so a pipeline's
// masks would depend on which thread ran first and on whether a forward was a recompute. These
// draw from the executor's per-(seed, step, micro-batch, layer) generator instead, which makes
// training with K = 1, 2, 4 give the same losses and makes a recompute replay its forward's
// masks exactly. Outside a pipeline they fall back to the default generator.
#pragma once

#include <torch/torch.h>

namespace gpipe {

// A mask of shape `sizes` whose entries are 1/keep with probability `keep` and 0 otherwise.
torch::Tensor keep_mask(at::IntArrayRef sizes, double keep, const torch::TensorOptions& options);

struct DropoutOptions {
  /* implicit */ DropoutOptions(double p = 0.5) : p_(p) {}
  TORCH_ARG(double, p);
};

// Element-wise dropout with probability p in training mode; identity in eval mode.
class DropoutImpl : public torch::nn::Cloneable<DropoutImpl> {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  DropoutOptions options;
};
TORCH_MODULE(Dropout);

// Drop-path (stochastic depth): zeroes a whole sample's branch with probability p and scales
// the kept ones by 1/(1-p), in training mode only.
torch::Tensor drop_path(const torch::Tensor& input, double p, bool training);

}  // namespace gpipe
