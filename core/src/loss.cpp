#include "gpipe/loss.h"

#include "gpipe/errors.h"

namespace gpipe {

LossFn cross_entropy_loss(double label_smoothing) {
  GPIPE_CHECK(label_smoothing >= 0 && label_smoothing < 1, ConfigError,
              "label smoothing must be in [0, 1), got ", label_smoothing);
  return [label_smoothing](const Activations& output, const torch::Tensor& target) {
    GPIPE_CHECK(!output.empty() && output[0].defined(), InputError,
                "cross-entropy needs logits as the last stage's first output");
    auto logits = output[0];
    auto labels = target;
    if (logits.dim() == 3) {  // (N, T, C) language-model logits against (N, T) tokens
      logits = logits.reshape({-1, logits.size(2)});
      labels = labels.reshape({-1});
    }
    return torch::nn::functional::cross_entropy(
        logits, labels,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
  };
}

LossFn mse_loss() {
  return [](const Activations& output, const torch::Tensor& target) {
    return torch::mse_loss(output.at(0), target);
  };
}

}  // namespace gpipe
