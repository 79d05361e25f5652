// Conv2d that keeps no low-precision copy of its weight per micro-batch.
//
// Why this file exists: under autocast, torch::nn::Conv2d's weight is cast to the compute dtype
// on every call and the convolution's backward keeps that copy until it runs. A pipeline runs a
// stage's forward once per micro-batch before their backwards, so with M micro-batches in flight
// a stage holds M bf16 copies of every convolution weight: on AmoebaNet-D's later stages (many
// channels, 4x4-pixel activations) they outweighed the activations themselves, and bf16 grew the
// peak instead of halving it. This Conv2d keeps the input (in the compute dtype) and the fp32
// master weight, and casts the weight again in its backward, as gpipe::Linear does. Outside
// autocast, or without a graph, it is torch::conv2d. Same parameters, initialisation and results
// as torch::nn::Conv2d (zero padding only).
#pragma once

#include <torch/torch.h>

namespace gpipe {

class Conv2dImpl : public torch::nn::Cloneable<Conv2dImpl> {
 public:
  explicit Conv2dImpl(const torch::nn::Conv2dOptions& options);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  // input: (N, C_in, H, W) -> (N, C_out, H', W')
  torch::Tensor forward(const torch::Tensor& input);

  torch::nn::Conv2dOptions options;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv2d);

}  // namespace gpipe
