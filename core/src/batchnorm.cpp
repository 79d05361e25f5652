#include "gpipe/batchnorm.h"

#include "gpipe/errors.h"

namespace gpipe {

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
  if (context == nullptr || !context->recompute) accumulate(input);
  auto output = torch::batch_norm(input, weight, bias, /*running_mean=*/{}, /*running_var=*/{},
                                  /*training=*/true, 0.0, options.eps(), /*cudnn_enabled=*/true);
  // A plain call (no pipeline) is its own mini-batch.
  if (context == nullptr) on_step_end();
  return output;
}

void DeferredBatchNormImpl::accumulate(const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d)
    dims.push_back(d);
  const int64_t n = input.numel() / options.num_features();
  auto [var, mean] = torch::var_mean(input.detach().to(torch::kDouble), dims, /*unbiased=*/false);
  auto m2 = var * static_cast<double>(n);
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
