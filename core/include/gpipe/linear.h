// Linear with fused gradient accumulation.
//
// Why this file exists: with M micro-batches, LibTorch's autograd computes each micro-batch's
// weight gradient into a fresh tensor and then adds it to .grad: one extra pass over the whole
// weight (and a fresh allocation of its size) per micro-batch and layer. For the 2048-wide MLP
// that is a tenth of a CPU pipeline step. This Linear accumulates the weight gradient in the
// GEMM itself (`grad.addmm_(grad_out^T, input)`, beta = 1), as Megatron's
// gradient-accumulation fusion does. Same parameters, initialisation and results as
// torch::nn::Linear; the one difference is that the weight and bias gradients reach .grad
// directly, so torch::autograd::grad() does not return them.
#pragma once

#include <torch/torch.h>

namespace gpipe {

class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
 public:
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const torch::nn::LinearOptions& options);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  // input: (..., in_features) -> (..., out_features)
  torch::Tensor forward(const torch::Tensor& input);

  torch::nn::LinearOptions options;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Linear);

}  // namespace gpipe
