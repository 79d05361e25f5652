#include "gpipe/pool.h"

namespace gpipe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast;

std::vector<int64_t> as_vector(at::IntArrayRef values) {
  return {values.begin(), values.end()};
}

std::vector<int64_t> saved_ints(AutogradContext* ctx, const char* key) {
  return ctx->saved_data[key].toIntVector();
}

// Max pooling of a channels-last copy; output and indices back in the input's layout. The
// backward scatters through the indices with LibTorch's kernel for the contiguous layout.
class MaxPool2dFunction : public torch::autograd::Function<MaxPool2dFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::nn::MaxPool2dOptions& options) {
    RECORD_FUNCTION("gpipe::max_pool2d", std::vector<c10::IValue>({input}));
    ctx->saved_data["kernel"] = as_vector(*options.kernel_size());
    ctx->saved_data["stride"] = as_vector(*options.stride());
    ctx->saved_data["padding"] = as_vector(*options.padding());
    ctx->saved_data["dilation"] = as_vector(*options.dilation());
    ctx->saved_data["ceil_mode"] = options.ceil_mode();
    auto [output, indices] = at::max_pool2d_with_indices(
        input.contiguous(kChannelsLast), *options.kernel_size(), *options.stride(),
        *options.padding(), *options.dilation(), options.ceil_mode());
    ctx->save_for_backward({input, indices.contiguous()});
    return output.contiguous();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto grad_input = at::max_pool2d_with_indices_backward(
        grad_outputs[0], saved[0], saved_ints(ctx, "kernel"), saved_ints(ctx, "stride"),
        saved_ints(ctx, "padding"), saved_ints(ctx, "dilation"),
        ctx->saved_data["ceil_mode"].toBool(), saved[1]);
    return {grad_input, torch::Tensor()};
  }
};

// Average pooling of a channels-last copy, and its backward channels-last too; both hand back
// the input's layout. The backward reads only the input's sizes, so nothing else is kept.
class AvgPool2dFunction : public torch::autograd::Function<AvgPool2dFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::nn::AvgPool2dOptions& options) {
    RECORD_FUNCTION("gpipe::avg_pool2d", std::vector<c10::IValue>({input}));
    ctx->saved_data["sizes"] = as_vector(input.sizes());
    ctx->saved_data["kernel"] = as_vector(*options.kernel_size());
    ctx->saved_data["stride"] = as_vector(*options.stride());
    ctx->saved_data["padding"] = as_vector(*options.padding());
    ctx->saved_data["ceil_mode"] = options.ceil_mode();
    ctx->saved_data["count_include_pad"] = options.count_include_pad();
    ctx->saved_data["divisor"] = options.divisor_override().value_or(0);
    return at::avg_pool2d(input.contiguous(kChannelsLast), *options.kernel_size(),
                          *options.stride(), *options.padding(), options.ceil_mode(),
                          options.count_include_pad(), options.divisor_override())
        .contiguous();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto& grad = grad_outputs[0];
    // Stands in for the input, whose sizes and layout are all the backward reads of it.
    const auto shape =
        torch::empty(saved_ints(ctx, "sizes"), grad.options().memory_format(kChannelsLast));
    const int64_t divisor = ctx->saved_data["divisor"].toInt();
    auto grad_input = at::avg_pool2d_backward(
        grad.contiguous(kChannelsLast), shape, saved_ints(ctx, "kernel"), saved_ints(ctx, "stride"),
        saved_ints(ctx, "padding"), ctx->saved_data["ceil_mode"].toBool(),
        ctx->saved_data["count_include_pad"].toBool(),
        divisor == 0 ? c10::optional<int64_t>() : c10::optional<int64_t>(divisor));
    return {grad_input.contiguous(), torch::Tensor()};
  }
};

}  // namespace

bool pools_channels_last(const torch::Tensor& input) {
  return input.device().is_cpu() && input.dim() == 4 && input.numel() > 0 && input.size(1) > 1 &&
         input.is_floating_point() && input.is_contiguous() && !input.is_contiguous(kChannelsLast);
}

torch::Tensor max_pool2d(const torch::Tensor& input, const torch::nn::MaxPool2dOptions& options) {
  if (pools_channels_last(input)) return MaxPool2dFunction::apply(input, options);
  return torch::max_pool2d(input, *options.kernel_size(), *options.stride(), *options.padding(),
                           *options.dilation(), options.ceil_mode());
}

torch::Tensor avg_pool2d(const torch::Tensor& input, const torch::nn::AvgPool2dOptions& options) {
  if (pools_channels_last(input)) return AvgPool2dFunction::apply(input, options);
  return torch::avg_pool2d(input, *options.kernel_size(), *options.stride(), *options.padding(),
                           options.ceil_mode(), options.count_include_pad(),
                           options.divisor_override());
}

MaxPool2dImpl::MaxPool2dImpl(const torch::nn::MaxPool2dOptions& options_) : options(options_) {}

torch::Tensor MaxPool2dImpl::forward(const torch::Tensor& input) {
  return max_pool2d(input, options);
}

void MaxPool2dImpl::pretty_print(std::ostream& stream) const {
  stream << "gpipe::MaxPool2d(kernel_size=" << options.kernel_size()
         << ", stride=" << options.stride() << ", padding=" << options.padding()
         << ", ceil_mode=" << options.ceil_mode() << ")";
}

AvgPool2dImpl::AvgPool2dImpl(const torch::nn::AvgPool2dOptions& options_) : options(options_) {}

torch::Tensor AvgPool2dImpl::forward(const torch::Tensor& input) {
  return avg_pool2d(input, options);
}

void AvgPool2dImpl::pretty_print(std::ostream& stream) const {
  stream << "gpipe::AvgPool2d(kernel_size=" << options.kernel_size()
         << ", stride=" << options.stride() << ", padding=" << options.padding()
         << ", ceil_mode=" << options.ceil_mode()
         << ", count_include_pad=" << options.count_include_pad() << ")";
}

}  // namespace gpipe
