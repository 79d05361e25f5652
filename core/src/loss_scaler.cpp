#include "gpipe/loss_scaler.h"

#include <cmath>

#include "gpipe/errors.h"

namespace gpipe {

LossScaler::LossScaler(const LossScaleOptions& options, bool enabled)
    : options_(options), enabled_(enabled) {
  GPIPE_CHECK(options.init_scale() > 0 && std::isfinite(options.init_scale()), ConfigError,
              "the initial loss scale must be positive and finite, got ", options.init_scale());
  GPIPE_CHECK(options.growth_factor() > 1 && std::isfinite(options.growth_factor()), ConfigError,
              "the loss scale's growth factor must be above 1, got ", options.growth_factor());
  GPIPE_CHECK(options.backoff_factor() > 0 && options.backoff_factor() < 1, ConfigError,
              "the loss scale's back-off factor must lie in (0, 1), got ",
              options.backoff_factor());
  GPIPE_CHECK(options.growth_interval() >= 1, ConfigError,
              "the loss scale's growth interval must be at least 1 step, got ",
              options.growth_interval());
  state_.scale = options.init_scale();
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  if (found_inf) {
    state_.scale *= options_.backoff_factor();
    state_.good_steps = 0;
    ++state_.skipped_steps;
    return;
  }
  if (++state_.good_steps < options_.growth_interval()) return;
  const double grown = state_.scale * options_.growth_factor();
  if (std::isfinite(grown)) state_.scale = grown;
  state_.good_steps = 0;
}

void LossScaler::load(const LossScaleState& state) {
  GPIPE_CHECK(state.scale > 0 && std::isfinite(state.scale), InputError, "the saved loss scale is ",
              state.scale, ": it must be positive and finite");
  GPIPE_CHECK(state.good_steps >= 0 && state.skipped_steps >= 0, InputError,
              "the saved loss scale's counters are negative (good steps ", state.good_steps,
              ", skipped ", state.skipped_steps, ")");
  state_ = state;
}

}  // namespace gpipe
