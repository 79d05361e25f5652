#include "train/optimization.h"

#include <cmath>

#include "common/optimizers.h"
#include "gpipe/errors.h"

namespace gpipe::train {

Pipeline::OptimizerFactory make_optimizer_factory(const TrainOptions& o) {
  return cli::make_optimizer_factory(o.optimizer);
}

LrSchedule::LrSchedule(const TrainOptions& o, int64_t total_steps, int64_t steps_per_epoch)
    : kind_(o.lr_schedule),
      peak_(o.optimizer.lr()),
      warmup_(o.warmup_steps),
      total_(total_steps),
      steps_per_epoch_(std::max<int64_t>(steps_per_epoch, 1)),
      decay_(o.lr_decay),
      decay_epochs_(o.lr_decay_epochs),
      min_lr_(o.min_lr) {
  GPIPE_CHECK(kind_ == "constant" || kind_ == "cosine" || kind_ == "exponential", ConfigError,
              "unknown --lr-schedule '", kind_, "': expected constant, cosine or exponential");
  GPIPE_CHECK(warmup_ >= 0, ConfigError, "--warmup-steps must be >= 0, got ", warmup_);
  GPIPE_CHECK(decay_ > 0 && decay_ <= 1 && decay_epochs_ > 0, ConfigError,
              "--lr-decay must be in (0, 1] and --lr-decay-epochs > 0, got ", decay_, " and ",
              decay_epochs_);
  GPIPE_CHECK(min_lr_ >= 0 && min_lr_ <= peak_, ConfigError, "--min-lr must be in [0, --lr], got ",
              min_lr_);
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_) return peak_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (kind_ == "cosine") {
    const double span = std::max<double>(1.0, static_cast<double>(total_ - warmup_));
    const double t = std::min(1.0, static_cast<double>(step - warmup_) / span);
    return min_lr_ + 0.5 * (peak_ - min_lr_) * (1.0 + std::cos(M_PI * t));
  }
  if (kind_ == "exponential") {
    const double epochs = static_cast<double>(step) / static_cast<double>(steps_per_epoch_);
    return peak_ * std::pow(decay_, std::floor(epochs / decay_epochs_));
  }
  return peak_;
}

}  // namespace gpipe::train
