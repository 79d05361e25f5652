// The building blocks of AmoebaNet cells: conv-BN units, factorized reduction, and the cell
// operations of a genotype.
//
// Why this file exists: every AmoebaNet operation is a short chain of the same few units
// (convolution without bias followed by the engine's deferred BatchNorm, with ReLUs between),
// so they are built here once, from an OperationSpec, for the cell to wire. Every operation's
// first step is a ReLU of its input, except pooling and identity: the cell applies that ReLU
// once per hidden state and hands the result to every operation that wants it, instead of each
// operation recomputing it (`relu_input` says which input an operation takes).
//
// Spatial sizes: a stride-2 operation maps H to ceil(H / 2) whatever its kernel (3x3 and 1x7
// convolutions and 3x3 pooling pad by half the kernel, 2x2 max pooling rounds up), so every
// branch of a reduction cell agrees for odd sizes too.
#pragma once

#include <torch/torch.h>

#include "gpipe/batchnorm.h"
#include "gpipe/conv.h"
#include "gpipe/models/amoebanet_genotype.h"

namespace gpipe::models {

// Batch-norm settings of AmoebaNet (the reference uses epsilon 1e-3).
constexpr double kAmoebaBatchNormEps = 1e-3;

struct ConvBnOptions {
  ConvBnOptions(int64_t in_channels, int64_t out_channels, torch::ExpandingArray<2> kernel)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_(kernel) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(torch::ExpandingArray<2>, kernel);
  TORCH_ARG(torch::ExpandingArray<2>, stride) = 1;
  TORCH_ARG(torch::ExpandingArray<2>, dilation) = 1;
  // Padding is dilation * (kernel - 1) / 2 on each side ("same" for odd kernels).
  TORCH_ARG(int64_t, groups) = 1;
};

// Convolution (no bias; LibTorch's default initialisation, which is twice as fast to draw as
// the reference's He-normal and matters little with a BatchNorm after every convolution)
// followed by DeferredBatchNorm.
class ConvBnImpl : public torch::nn::Cloneable<ConvBnImpl> {
 public:
  explicit ConvBnImpl(const ConvBnOptions& options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);

  ConvBnOptions options;
  Conv2d conv{nullptr};
  DeferredBatchNorm bn{nullptr};
};
TORCH_MODULE(ConvBn);

// Separable convolution: depthwise KxK (stride, dilation), pointwise 1x1, DeferredBatchNorm.
class SeparableConvBnImpl : public torch::nn::Cloneable<SeparableConvBnImpl> {
 public:
  SeparableConvBnImpl(int64_t channels, int64_t kernel, int64_t stride, int64_t dilation);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);

  int64_t channels, kernel, stride, dilation;
  Conv2d depthwise{nullptr}, pointwise{nullptr};
  DeferredBatchNorm bn{nullptr};
};
TORCH_MODULE(SeparableConvBn);

// Halves the resolution without discarding pixels: two 1x1 convolutions, each to half of
// `out_channels`, one on the even and one on the odd pixel grid, concatenated, then
// DeferredBatchNorm. Takes its input already ReLU'd. out_channels must be even.
class FactorizedReduceImpl : public torch::nn::Cloneable<FactorizedReduceImpl> {
 public:
  FactorizedReduceImpl(int64_t in_channels, int64_t out_channels);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);

  int64_t in_channels, out_channels;
  Conv2d even{nullptr}, odd{nullptr};
  DeferredBatchNorm bn{nullptr};
};
TORCH_MODULE(FactorizedReduce);

// One operation of a cell on `channels` channels.
struct CellOperation {
  OperationSpec spec;
  // The layers of the operation; null for a plain identity.
  torch::nn::Sequential module{nullptr};
  // The operation takes ReLU(state) rather than the state itself.
  bool relu_input = false;
  // The reference applies drop-path to every operation's output except "none".
  bool drop_path = false;

  torch::Tensor forward(const torch::Tensor& input) {
    return module ? module->forward(input) : input;
  }
};

// Builds the operation `spec` with `channels` channels in and out and the given stride (1 or 2).
CellOperation make_cell_operation(const OperationSpec& spec, int64_t channels, int64_t stride);

}  // namespace gpipe::models
