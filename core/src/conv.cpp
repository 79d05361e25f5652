#include "gpipe/conv.h"

#include <torch/csrc/autograd/custom_function.h>

#include "gpipe/errors.h"
#include "gpipe/precision.h"

namespace gpipe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> to_vector(const torch::ExpandingArray<2>& a) {
  return {(*a)[0], (*a)[1]};
}

// The alternative T of an options variant, or null: c10's own variant in LibTorch 1.13,
// std::variant from 2.0 on.
template <typename T, typename Variant>
const T* alternative(const Variant& v) {
#if TORCH_VERSION_MAJOR >= 2
  return std::get_if<T>(&v);
#else
  return c10::get_if<T>(&v);
#endif
}

const torch::ExpandingArray<2>& padding_of(const torch::nn::Conv2dOptions& options) {
  return *alternative<torch::ExpandingArray<2>>(options.padding());
}

// y = conv(x, W) + b in the autocast dtype (x and W cast here, as the dispatcher would cast
// them for torch::conv2d). Only x is kept in that dtype; the backward casts the fp32 W again and
// returns dx in x's own dtype, dW and db in fp32.
class AutocastConvFunction : public torch::autograd::Function<AutocastConvFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias,
                               const torch::nn::Conv2dOptions& options) {
    const auto dtype = autocast_dtype_for(input);
    const auto x = input.to(dtype);
    ctx->save_for_backward({x});
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["stride"] = to_vector(options.stride());
    ctx->saved_data["padding"] = to_vector(padding_of(options));
    ctx->saved_data["dilation"] = to_vector(options.dilation());
    ctx->saved_data["groups"] = options.groups();
    return torch::conv2d(x, weight.to(dtype), bias ? bias->to(dtype) : torch::Tensor(),
                         options.stride(), padding_of(options), options.dilation(),
                         options.groups());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto input = ctx->get_saved_variables()[0];
    const auto weight = ctx->saved_data["weight"].toTensor();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::array<bool, 3> wanted{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                     has_bias && ctx->needs_input_grad(2)};
    const auto stride = ctx->saved_data["stride"].toIntVector();
    const auto padding = ctx->saved_data["padding"].toIntVector();
    const auto dilation = ctx->saved_data["dilation"].toIntVector();
    const std::vector<int64_t> bias_sizes{weight.size(0)};
    auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
        grad_outputs[0].to(input.scalar_type()), input, weight.to(input.scalar_type()),
        has_bias ? at::OptionalIntArrayRef(bias_sizes) : c10::nullopt, stride, padding, dilation,
        /*transposed=*/false, /*output_padding=*/{0, 0}, ctx->saved_data["groups"].toInt(), wanted);
    const auto input_dtype = static_cast<c10::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    return {wanted[0] ? grad_input.to(input_dtype) : torch::Tensor(),
            wanted[1] ? grad_weight.to(weight.scalar_type()) : torch::Tensor(),
            wanted[2] ? grad_bias.to(weight.scalar_type()) : torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Conv2dImpl::Conv2dImpl(const torch::nn::Conv2dOptions& options_) : options(options_) {
  reset();
}

void Conv2dImpl::reset() {
  GPIPE_CHECK(alternative<torch::enumtype::kZeros>(options.padding_mode()) != nullptr, ConfigError,
              "gpipe::Conv2d pads with zeros only; use torch::nn::Conv2d for '",
              torch::enumtype::get_enum_name(options.padding_mode()), "' padding");
  GPIPE_CHECK(alternative<torch::ExpandingArray<2>>(options.padding()) != nullptr, ConfigError,
              "gpipe::Conv2d takes explicit padding sizes, not 'same' or 'valid'");
  // Initialised exactly as torch::nn::Conv2d, from the same generator draws.
  torch::nn::Conv2d reference(options);
  weight = register_parameter("weight", reference->weight.detach().clone());
  if (options.bias()) {
    bias = register_parameter("bias", reference->bias.detach().clone());
  } else {
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
}

void Conv2dImpl::pretty_print(std::ostream& stream) const {
  stream << "gpipe::Conv2d(" << options.in_channels() << ", " << options.out_channels()
         << ", kernel_size=" << options.kernel_size() << ", stride=" << options.stride()
         << ", groups=" << options.groups() << ", bias=" << options.bias() << ")";
}

torch::Tensor Conv2dImpl::forward(const torch::Tensor& input) {
  const auto& padding = padding_of(options);
  if (!torch::GradMode::is_enabled() || autocast_dtype_for(input) == weight.scalar_type() ||
      !(weight.requires_grad() || input.requires_grad())) {
    return torch::conv2d(input, weight, bias, options.stride(), padding, options.dilation(),
                         options.groups());
  }
  return AutocastConvFunction::apply(
      input, weight, bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt, options);
}

}  // namespace gpipe
