#include "gpipe/linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include "gpipe/precision.h"

namespace gpipe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// g += update, or g = update (in g's dtype) when g has none yet.
void accumulate(torch::Tensor& grad, const torch::Tensor& update, const torch::Tensor& param) {
  if (grad.defined()) {
    grad.add_(update);
  } else {
    grad = update.to(param.scalar_type());
  }
}

// dW += g^T x and db += sum(g), accumulated in place into the parameters' .grad, each where
// the backward in progress asks for it. Under autocast g and x are in the compute dtype while
// the master weights are fp32: the product is formed in the compute dtype (as autocast's own
// linear backward does) and added to the fp32 gradient.
void accumulate_weight_grad(torch::Tensor weight, torch::Tensor bias, const torch::Tensor& grad_2d,
                            const torch::Tensor& input_2d, bool weight_wanted, bool bias_wanted) {
  if (weight_wanted) {
    auto& weight_grad = weight.mutable_grad();
    if (weight_grad.defined() && grad_2d.scalar_type() == weight.scalar_type()) {
      weight_grad.addmm_(grad_2d.t(), input_2d);
    } else {
      accumulate(weight_grad, torch::mm(grad_2d.t(), input_2d), weight);
    }
  }
  if (bias_wanted) accumulate(bias.mutable_grad(), grad_2d.sum(0), bias);
}

// y = x W^T + b. Backward returns dx and adds dW, db to the parameters' .grad in place, each only
// where the engine asks for it: a split B (backward_split.h) asks for dx alone, its W for dW and
// db alone. Under autocast the forward computes in the autocast dtype (x and W cast here, as
// the dispatcher would for torch::linear) and dx returns in x's own dtype. Only x is kept in
// that dtype: the backward casts W again rather than keep a copy per micro-batch (with M
// micro-batches in flight those copies were most of a Transformer's bf16 activation bytes).
class FusedLinearFunction : public torch::autograd::Function<FusedLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias) {
    const auto dtype = autocast_dtype_for(input);
    const auto x = input.to(dtype);
    const auto w = weight.to(dtype);
    ctx->save_for_backward({x});
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
    ctx->saved_data["bias"] = bias;
    return torch::linear(x, w, bias ? bias->to(dtype) : torch::Tensor());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto input = ctx->get_saved_variables()[0];
    auto weight = ctx->saved_data["weight"].toTensor();
    const auto& saved_bias = ctx->saved_data["bias"];
    auto bias = saved_bias.isNone() ? torch::Tensor() : saved_bias.toTensor();
    const auto& grad = grad_outputs[0];
    torch::Tensor grad_input;
    if (ctx->needs_input_grad(0)) {
      const auto input_dtype = static_cast<c10::ScalarType>(ctx->saved_data["input_dtype"].toInt());
      grad_input = grad.matmul(weight.to(input.scalar_type())).to(input_dtype);
    }
    const bool weight_wanted = ctx->needs_input_grad(1);
    const bool bias_wanted = bias.defined() && ctx->needs_input_grad(2);
    if (weight_wanted || bias_wanted) {
      accumulate_weight_grad(weight, bias, grad.reshape({-1, grad.size(-1)}),
                             input.reshape({-1, input.size(-1)}), weight_wanted, bias_wanted);
    }
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
