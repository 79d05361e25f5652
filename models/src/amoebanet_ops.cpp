// AmoebaNet's conv-BN units and cell operations, following the TensorFlow reference's
// network_utils.py (operation structure and bottlenecks) with PyTorch-style padding.
#include "gpipe/models/amoebanet_ops.h"

#include "gpipe/errors.h"
#include "gpipe/pool.h"

namespace gpipe::models {
namespace {

Conv2d make_conv(int64_t in, int64_t out, torch::ExpandingArray<2> kernel,
                 torch::ExpandingArray<2> stride, torch::ExpandingArray<2> dilation,
                 int64_t groups) {
  std::vector<int64_t> padding{(*dilation)[0] * ((*kernel)[0] - 1) / 2,
                               (*dilation)[1] * ((*kernel)[1] - 1) / 2};
  Conv2d conv(torch::nn::Conv2dOptions(in, out, kernel)
                  .stride(stride)
                  .padding(torch::ExpandingArray<2>(padding))
                  .dilation(dilation)
                  .groups(groups)
                  .bias(false));
  return conv;
}

DeferredBatchNorm make_bn(int64_t channels) {
  return DeferredBatchNorm(DeferredBatchNormOptions(channels).eps(kAmoebaBatchNormEps));
}

}  // namespace

ConvBnImpl::ConvBnImpl(const ConvBnOptions& options_) : options(options_) {
  reset();
}

void ConvBnImpl::reset() {
  conv = register_module("conv",
                         make_conv(options.in_channels(), options.out_channels(), options.kernel(),
                                   options.stride(), options.dilation(), options.groups()));
  bn = register_module("bn", make_bn(options.out_channels()));
}

torch::Tensor ConvBnImpl::forward(const torch::Tensor& input) {
  return bn(conv(input));
}

SeparableConvBnImpl::SeparableConvBnImpl(int64_t channels_, int64_t kernel_, int64_t stride_,
                                         int64_t dilation_)
    : channels(channels_), kernel(kernel_), stride(stride_), dilation(dilation_) {
  reset();
}

void SeparableConvBnImpl::reset() {
  depthwise = register_module(
      "depthwise", make_conv(channels, channels, kernel, stride, dilation, /*groups=*/channels));
  pointwise = register_module("pointwise", make_conv(channels, channels, 1, 1, 1, 1));
  bn = register_module("bn", make_bn(channels));
}

torch::Tensor SeparableConvBnImpl::forward(const torch::Tensor& input) {
  return bn(pointwise(depthwise(input)));
}

FactorizedReduceImpl::FactorizedReduceImpl(int64_t in_channels_, int64_t out_channels_)
    : in_channels(in_channels_), out_channels(out_channels_) {
  reset();
}

void FactorizedReduceImpl::reset() {
  GPIPE_CHECK(out_channels % 2 == 0, ConfigError,
              "factorized reduction needs an even number of output channels, got ", out_channels);
  even = register_module("even", make_conv(in_channels, out_channels / 2, 1, 2, 1, 1));
  odd = register_module("odd", make_conv(in_channels, out_channels / 2, 1, 2, 1, 1));
  bn = register_module("bn", make_bn(out_channels));
}

torch::Tensor FactorizedReduceImpl::forward(const torch::Tensor& input) {
  auto a = even(input);
  // The odd grid: shift by one pixel; an odd size leaves its last row/column to zero padding.
  auto b = odd(input.slice(2, 1).slice(3, 1));
  const int64_t pad_h = a.size(2) - b.size(2);
  const int64_t pad_w = a.size(3) - b.size(3);
  if (pad_h != 0 || pad_w != 0) b = torch::constant_pad_nd(b, {0, pad_w, 0, pad_h});
  return bn(torch::cat({a, b}, 1));
}

CellOperation make_cell_operation(const OperationSpec& spec, int64_t channels, int64_t stride) {
  using Kind = OperationSpec::Kind;
  CellOperation op;
  op.spec = spec;
  op.drop_path = spec.kind != Kind::kIdentity;
  switch (spec.kind) {
    case Kind::kIdentity:
      if (stride > 1) {
        op.module =
            torch::nn::Sequential(ConvBn(ConvBnOptions(channels, channels, 1).stride(stride)));
        op.relu_input = true;
      }
      break;
    case Kind::kConv:
      op.relu_input = true;
      if (spec.kernel == 1) {
        op.module =
            torch::nn::Sequential(ConvBn(ConvBnOptions(channels, channels, 1).stride(stride)));
      } else {
        // Bottleneck: 1x1 down to a quarter, the spatial convolution(s), 1x1 back up.
        GPIPE_CHECK(channels % 4 == 0, ConfigError, "AmoebaNet operation '", spec.name,
                    "' bottlenecks to a quarter of its ", channels,
                    " channels, which must be divisible by 4");
        const int64_t r = channels / 4;
        torch::nn::Sequential seq;
        seq->push_back(ConvBn(ConvBnOptions(channels, r, 1)));
        seq->push_back(torch::nn::ReLU());
        if (spec.factorized) {
          seq->push_back(ConvBn(ConvBnOptions(r, r, {1, spec.kernel}).stride({1, stride})));
          seq->push_back(torch::nn::ReLU());
          seq->push_back(ConvBn(ConvBnOptions(r, r, {spec.kernel, 1}).stride({stride, 1})));
        } else {
          seq->push_back(ConvBn(ConvBnOptions(r, r, spec.kernel).stride(stride)));
        }
        seq->push_back(torch::nn::ReLU());
        seq->push_back(ConvBn(ConvBnOptions(r, channels, 1)));
        op.module = seq;
      }
      break;
    case Kind::kSeparable: {
      op.relu_input = true;
      torch::nn::Sequential seq;
      for (int i = 0; i < spec.repeats; ++i) {
        if (i > 0) seq->push_back(torch::nn::ReLU());
        seq->push_back(SeparableConvBn(channels, spec.kernel, i == 0 ? stride : 1, spec.dilation));
      }
      op.module = seq;
      break;
    }
    case Kind::kMaxPool:
    case Kind::kAvgPool: {
      // Odd kernels pad by half the kernel; even ones (2x2) only stride by 2 and round up.
      const bool even = spec.kernel % 2 == 0;
      GPIPE_CHECK(!even || stride == 2, ConfigError, "AmoebaNet operation '", spec.name,
                  "' needs stride 2, got ", stride);
      const int64_t padding = even ? 0 : spec.kernel / 2;
      if (spec.kind == Kind::kMaxPool) {
        op.module = torch::nn::Sequential(MaxPool2d(torch::nn::MaxPool2dOptions(spec.kernel)
                                                        .stride(stride)
                                                        .padding(padding)
                                                        .ceil_mode(even)));
      } else {
        op.module = torch::nn::Sequential(AvgPool2d(torch::nn::AvgPool2dOptions(spec.kernel)
                                                        .stride(stride)
                                                        .padding(padding)
                                                        .ceil_mode(even)
                                                        .count_include_pad(false)));
      }
      break;
    }
  }
  return op;
}

}  // namespace gpipe::models
