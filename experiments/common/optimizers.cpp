// make_optimizer_factory (optimizers.h).
#include "common/optimizers.h"

#include <cmath>

#include "gpipe/errors.h"

namespace gpipe::cli {

Pipeline::OptimizerFactory make_optimizer_factory(const OptimizerSettings& o) {
  GPIPE_CHECK(o.lr() > 0 && std::isfinite(o.lr()), ConfigError, "--lr must be > 0, got ", o.lr());
  GPIPE_CHECK(o.weight_decay() >= 0, ConfigError, "--weight-decay must be >= 0, got ",
              o.weight_decay());
  GPIPE_CHECK(o.momentum() >= 0 && o.momentum() < 1, ConfigError,
              "--momentum must be in [0, 1), got ", o.momentum());
  if (o.name() == "sgd") {
    GPIPE_CHECK(!o.nesterov() || o.momentum() > 0, ConfigError, "--nesterov needs --momentum > 0");
    const auto sgd = torch::optim::SGDOptions(o.lr())
                         .momentum(o.momentum())
                         .nesterov(o.nesterov())
                         .weight_decay(o.weight_decay());
    return [sgd](std::vector<torch::Tensor> params) {
      return std::make_unique<torch::optim::SGD>(params, sgd);
    };
  }
  if (o.name() == "rmsprop") {
    const auto rms = torch::optim::RMSpropOptions(o.lr())
                         .alpha(o.rmsprop_decay())
                         .eps(o.rmsprop_eps())
                         .momentum(o.momentum())
                         .weight_decay(o.weight_decay());
    return [rms](std::vector<torch::Tensor> params) {
      return std::make_unique<torch::optim::RMSprop>(params, rms);
    };
  }
  if (o.name() == "adam" || o.name() == "adamw") {
    GPIPE_CHECK(
        o.adam_beta1() >= 0 && o.adam_beta1() < 1 && o.adam_beta2() >= 0 && o.adam_beta2() < 1,
        ConfigError, "Adam betas must be in [0, 1), got ", o.adam_beta1(), " and ", o.adam_beta2());
    if (o.name() == "adamw") {
      const auto adamw = torch::optim::AdamWOptions(o.lr())
                             .betas({o.adam_beta1(), o.adam_beta2()})
                             .eps(o.adam_eps())
                             .weight_decay(o.weight_decay());
      return [adamw](std::vector<torch::Tensor> params) {
        return std::make_unique<torch::optim::AdamW>(params, adamw);
      };
    }
    const auto adam = torch::optim::AdamOptions(o.lr())
                          .betas({o.adam_beta1(), o.adam_beta2()})
                          .eps(o.adam_eps())
                          .weight_decay(o.weight_decay());
    return [adam](std::vector<torch::Tensor> params) {
      return std::make_unique<torch::optim::Adam>(params, adam);
    };
  }
  throw ConfigError(
      c10::str("unknown optimizer '", o.name(), "': expected sgd, rmsprop, adam or adamw"));
}

}  // namespace gpipe::cli
