#include "gpipe/batchnorm.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "gpipe/errors.h"
#include "gpipe/step_collectives.h"

namespace gpipe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Dimensions a BatchNorm reduces over (all but the channels), and a channel vector's shape
// broadcast against the input.
std::vector<int64_t> reduced_dims(const torch::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d)
    dims.push_back(d);
  return dims;
}
std::vector<int64_t> channel_shape(const torch::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = input.size(1);
  return shape;
}

// y = (x - mean) * invstd * weight + bias, with the mean and invstd of the micro-batch over
// every replica. They depend on every replica's input, so the backward sums dy and dy * xhat
// over the replicas too: dx = weight * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), the
// means over all `count` samples. The weight and bias gradients stay local (the gradient
// reducer sums them).
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& mean, const torch::Tensor& invstd, double count,
                               StepCollectives* replicas) {
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    // The collectives outlive every graph of their pipeline's steps.
    ctx->saved_data["replicas"] = reinterpret_cast<int64_t>(replicas);
    const auto shape = channel_shape(input);
    auto xhat = (input - mean.view(shape)) * invstd.view(shape);
    return weight.defined() ? xhat * weight.view(shape) + bias.view(shape) : xhat;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const double count = ctx->saved_data["count"].toDouble();
    auto* replicas = reinterpret_cast<StepCollectives*>(ctx->saved_data["replicas"].toInt());
    const auto& dy = grad_outputs[0];
    const auto shape = channel_shape(input);
    const auto dims = reduced_dims(input);
    const int64_t c = input.size(1);
    const auto xhat = (input - mean.view(shape)) * invstd.view(shape);
    const auto sum_dy = dy.sum(dims);
    const auto sum_dy_xhat = (dy * xhat).sum(dims);
    torch::Tensor dx, dweight, dbias;
    // A split backward's W asks for the local weight and bias gradients alone: no collective.
    if (ctx->needs_input_grad(0)) {
      auto sums = torch::cat({sum_dy, sum_dy_xhat}).to(torch::kDouble);
      replicas->sum_batchnorm_statistics(sums);
      const auto means = (sums / count).to(dy.scalar_type());
      auto scale = weight.defined() ? invstd * weight : invstd;
      dx = (dy - means.narrow(0, 0, c).view(shape) - xhat * means.narrow(0, c, c).view(shape)) *
           scale.view(shape);
    }
    if (weight.defined()) {
      if (ctx->needs_input_grad(1)) dweight = sum_dy_xhat;
      if (ctx->needs_input_grad(2)) dbias = sum_dy;
    }
    return {dx, dweight, dbias, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

DeferredBatchNormImpl::DeferredBatchNormImpl(const DeferredBatchNormOptions& options_)
    : options(options_) {
  reset();
}

void DeferredBatchNormImpl::reset() {
  GPIPE_CHECK(options.num_features() > 0, ConfigError,
              "BatchNorm needs a positive number of features, got ", options.num_features());
  const int64_t c = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", torch::ones({c}));
    bias = register_parameter("bias", torch::zeros({c}));
  } else {
    weight = register_parameter("weight", torch::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
  running_mean = register_buffer("running_mean", torch::zeros({c}));
  running_var = register_buffer("running_var", torch::ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  on_step_abort();
}

void DeferredBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "gpipe::DeferredBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", affine=" << options.affine() << ")";
}

torch::Tensor DeferredBatchNormImpl::forward(const torch::Tensor& input) {
  GPIPE_CHECK(input.dim() >= 2 && input.dim() <= 4 && input.size(1) == options.num_features(),
              ConfigError, "BatchNorm(", options.num_features(),
              ") expects input (N, C[, ...]) with C = ", options.num_features(), ", got sizes ",
              input.sizes());
  if (!is_training()) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, /*training=*/false,
                             0.0, options.eps(), /*cudnn_enabled=*/true);
  }
  auto* context = current_layer_context();
  if (context != nullptr && context->replicas != nullptr) return forward_synchronised(input);
  // native_batch_norm returns the micro-batch's mean and 1/sqrt(var + eps) beside the output:
  // the statistics come from the normalisation's own pass, not from a second one.
  auto [output, mean, invstd] =
      torch::native_batch_norm(input, weight, bias, /*running_mean=*/{}, /*running_var=*/{},
                               /*training=*/true, 0.0, options.eps());
  if (context == nullptr || !context->recompute) accumulate(input, mean, invstd);
  // A plain call (no pipeline) is its own mini-batch.
  if (context == nullptr) on_step_end();
  return output;
}

torch::Tensor DeferredBatchNormImpl::forward_synchronised(const torch::Tensor& input) {
  const auto* context = current_layer_context();
  const int64_t c = options.num_features();
  torch::Tensor sums;
  {
    torch::NoGradGuard no_grad;
    const auto x = input.detach().to(torch::kDouble);
    const auto dims = reduced_dims(input);
    const double n = static_cast<double>(input.numel() / c);
    sums = torch::cat({x.sum(dims), x.square().sum(dims), torch::full({1}, n, x.options())});
  }
  // Every replica runs this layer for this micro-batch at the same point of its schedule.
  context->replicas->sum_batchnorm_statistics(sums);
  const double count = sums[2 * c].item<double>();
  const auto mean = sums.narrow(0, 0, c) / count;
  const auto var = (sums.narrow(0, c, c) / count - mean.square()).clamp_min(0);
  if (!context->recompute) merge(mean, var * count, static_cast<int64_t>(std::llround(count)));
  const auto invstd = (var + options.eps()).rsqrt().to(input.scalar_type());
  return SyncBatchNormFunction::apply(input, weight, bias, mean.to(input.scalar_type()), invstd,
                                      count, context->replicas);
}

void DeferredBatchNormImpl::accumulate(const torch::Tensor& input, const torch::Tensor& mean,
                                       const torch::Tensor& invstd) {
  torch::NoGradGuard no_grad;
  const int64_t n = input.numel() / options.num_features();
  // The biased variance, back from 1/sqrt(var + eps); clamped where rounding makes it negative.
  const auto var =
      (invstd.detach().to(torch::kDouble).square().reciprocal() - options.eps()).clamp_min(0);
  merge(mean.detach().to(torch::kDouble), var * static_cast<double>(n), n);
}

void DeferredBatchNormImpl::merge(const torch::Tensor& mean, const torch::Tensor& m2, int64_t n) {
  if (count_ == 0) {
    mean_ = mean;
    m2_ = m2;
  } else {
    const double total = static_cast<double>(count_ + n);
    auto delta = mean - mean_;
    mean_ = mean_ + delta * (static_cast<double>(n) / total);
    m2_ = m2_ + m2 + delta.square() * (static_cast<double>(count_) * n / total);
  }
  count_ += n;
}

void DeferredBatchNormImpl::on_step_end() {
  if (count_ == 0) return;
  torch::NoGradGuard no_grad;
  num_batches_tracked += 1;
  const double factor = options.momentum().has_value() ? *options.momentum()
                                                       : 1.0 / num_batches_tracked.item<double>();
  const double bessel = count_ > 1 ? static_cast<double>(count_) / (count_ - 1) : 1.0;
  auto var = m2_ / static_cast<double>(count_) * bessel;
  running_mean.mul_(1 - factor).add_(mean_.to(running_mean.dtype()), factor);
  running_var.mul_(1 - factor).add_(var.to(running_var.dtype()), factor);
  on_step_abort();
}

void DeferredBatchNormImpl::on_step_abort() {
  count_ = 0;
  mean_ = torch::Tensor();
  m2_ = torch::Tensor();
}

}  // namespace gpipe
