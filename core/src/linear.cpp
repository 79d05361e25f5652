#include "gpipe/linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include "gpipe/layer.h"
#include "gpipe/weight_grad.h"

namespace gpipe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// dW += g^T x and db += sum(g), accumulated in place into the parameters' .grad.
void accumulate_weight_grad(torch::Tensor weight, torch::Tensor bias, const torch::Tensor& grad_2d,
                            const torch::Tensor& input_2d) {
  if (weight.requires_grad()) {
    auto& weight_grad = weight.mutable_grad();
    if (weight_grad.defined()) {
      weight_grad.addmm_(grad_2d.t(), input_2d);
    } else {
      weight_grad = torch::mm(grad_2d.t(), input_2d);
    }
  }
  if (bias.defined() && bias.requires_grad()) {
    auto& bias_grad = bias.mutable_grad();
    if (bias_grad.defined()) {
      bias_grad.add_(grad_2d.sum(0));
    } else {
      bias_grad = grad_2d.sum(0);
    }
  }
}

// y = x W^T + b. Backward returns dx and adds dW, db to the parameters' .grad in place, at once
// or, inside a split B, later in W (the micro-batch's WeightGradQueue).
class FusedLinearFunction : public torch::autograd::Function<FusedLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias) {
    ctx->save_for_backward({input});
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["bias"] = bias;
    const auto* context = current_layer_context();
    ctx->saved_data["weight_grad_token"] = context != nullptr ? context->weight_grad_token : 0;
    return torch::linear(input, weight, bias.value_or(torch::Tensor()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto input = ctx->get_saved_variables()[0];
    auto weight = ctx->saved_data["weight"].toTensor();
    const auto& saved_bias = ctx->saved_data["bias"];
    auto bias = saved_bias.isNone() ? torch::Tensor() : saved_bias.toTensor();
    const auto& grad = grad_outputs[0];
    torch::Tensor grad_input;
    if (ctx->needs_input_grad(0)) grad_input = grad.matmul(weight);
    const auto grad_2d = grad.reshape({-1, grad.size(-1)});
    const auto input_2d = input.reshape({-1, input.size(-1)});
    const int64_t token = ctx->saved_data["weight_grad_token"].toInt();
    const bool deferred = WeightGradQueue::defer(token, [weight, bias, grad_2d, input_2d] {
      accumulate_weight_grad(weight, bias, grad_2d, input_2d);
    });
    if (!deferred) accumulate_weight_grad(weight, bias, grad_2d, input_2d);
    return {grad_input, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

LinearImpl::LinearImpl(const torch::nn::LinearOptions& options_) : options(options_) {
  reset();
}

void LinearImpl::reset() {
  // Initialised exactly as torch::nn::Linear, from the same generator draws.
  torch::nn::Linear reference(options);
  weight = register_parameter("weight", reference->weight.detach().clone());
  if (options.bias()) {
    bias = register_parameter("bias", reference->bias.detach().clone());
  } else {
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << "gpipe::Linear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << options.bias() << ")";
}

torch::Tensor LinearImpl::forward(const torch::Tensor& input) {
  if (!torch::GradMode::is_enabled() || !(weight.requires_grad() || input.requires_grad())) {
    return torch::linear(input, weight, bias);
  }
  return FusedLinearFunction::apply(
      input, weight, bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
}

}  // namespace gpipe
