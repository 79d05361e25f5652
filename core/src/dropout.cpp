#include "gpipe/dropout.h"

#include "gpipe/errors.h"
#include "gpipe/layer.h"

namespace gpipe {

torch::Tensor keep_mask(at::IntArrayRef sizes, double keep, const torch::TensorOptions& options) {
  auto mask = torch::empty(sizes, options);
  if (auto* context = current_layer_context()) {
    mask.bernoulli_(keep, context->generator(options.device()));
  } else {
    mask.bernoulli_(keep);
  }
  return mask.div_(keep);
}

DropoutImpl::DropoutImpl(const DropoutOptions& options_) : options(options_) {
  reset();
}

void DropoutImpl::reset() {
  GPIPE_CHECK(options.p() >= 0 && options.p() < 1, ConfigError,
              "dropout probability must be in [0, 1), got ", options.p());
}

torch::Tensor DropoutImpl::forward(const torch::Tensor& input) {
  if (!is_training() || options.p() == 0) return input;
  return input * keep_mask(input.sizes(), 1.0 - options.p(), input.options());
}

void DropoutImpl::pretty_print(std::ostream& stream) const {
  stream << "gpipe::Dropout(p=" << options.p() << ")";
}

torch::Tensor drop_path(const torch::Tensor& input, double p, bool training) {
  GPIPE_CHECK(p >= 0 && p < 1, ConfigError, "drop-path probability must be in [0, 1), got ", p);
  if (!training || p == 0) return input;
  std::vector<int64_t> shape(input.dim(), 1);
  shape[0] = input.size(0);
  return input * keep_mask(shape, 1.0 - p, input.options());
}

}  // namespace gpipe
