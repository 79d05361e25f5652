// Pooling that takes LibTorch's fast CPU kernels.
//
// Why this file exists: LibTorch's CPU max and average pooling visit one output element at a
// time when the tensor is contiguous, the layout every convolution here hands them. On
// AmoebaNet-D (L=6, D=64, 64x64 images, batch 64), whose cells pool every channel 3x3, that was
// 95 ms of a 303 ms one-thread step (results/amoebanet_speed/README.md). Their
// channels-last kernels run across channels in vectors and compute the same thing in the same
// order: the same outputs, the same max-pooling indices (positions within a plane; the first
// maximum in the window's row-major order, a NaN winning) and the same average-pooling sums,
// bit for bit. So these pool a channels-last copy and hand the output back contiguous; the
// backward is LibTorch's: max pooling's scatters through the indices, average pooling's runs
// channels-last too. The backward keeps the input and the indices (max) or only the input's
// sizes (average), never the copy. What does not take this path (CUDA, 3-D inputs, inputs
// channels-last already, one channel, integer tensors) goes to LibTorch's pooling as it is.
#pragma once

#include <torch/torch.h>

namespace gpipe {

// Whether pooling this input goes through a channels-last copy: a 4-D floating-point CPU tensor
// of more than one channel, contiguous and not channels-last as well.
bool pools_channels_last(const torch::Tensor& input);

// torch::nn::functional::max_pool2d / avg_pool2d, with LibTorch's semantics and gradients.
torch::Tensor max_pool2d(const torch::Tensor& input, const torch::nn::MaxPool2dOptions& options);
torch::Tensor avg_pool2d(const torch::Tensor& input, const torch::nn::AvgPool2dOptions& options);

// torch::nn::MaxPool2d and AvgPool2d, through the functions above.
class MaxPool2dImpl : public torch::nn::Cloneable<MaxPool2dImpl> {
 public:
  explicit MaxPool2dImpl(const torch::nn::MaxPool2dOptions& options);
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  torch::nn::MaxPool2dOptions options;
};
TORCH_MODULE(MaxPool2d);

class AvgPool2dImpl : public torch::nn::Cloneable<AvgPool2dImpl> {
 public:
  explicit AvgPool2dImpl(const torch::nn::AvgPool2dOptions& options);
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  torch::nn::AvgPool2dOptions options;
};
TORCH_MODULE(AvgPool2d);

}  // namespace gpipe
