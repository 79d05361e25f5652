// LossScaler: the dynamic loss scale of fp16 training, one verdict per step for every stage.
//
// Why this file exists: fp16 gradients of small magnitude underflow to zero, so the last stage
// multiplies the loss by a scale S before its backward and the update divides the gradients by S
// again. Too large an S overflows: some gradient is inf or NaN. The pipeline then decides once,
// over every stage and every replica (the squared gradient norm it reduces anyway is non-finite
// if any gradient is), to skip the step everywhere, and the scale backs off. After
// `growth_interval` clean steps in a row it grows again. As torch.amp.GradScaler does:
//
//   step      1   2   3  ...  2000  2001  2002 (inf)  2003
//   S       64K 64K 64K  ...  64K   128K  128K ──►     64K     (skipped: nothing applied)
//
// bf16 has fp32's exponent range and needs no scaler. The state is saved in snapshots so that a
// resumed run continues with the same scale and count.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace gpipe {

struct LossScaleOptions {
  // Scale even where the precision does not need it (fp16 always scales).
  TORCH_ARG(bool, enabled) = false;
  TORCH_ARG(double, init_scale) = 65536.0;
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  // Clean steps in a row before the scale grows.
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

// What a snapshot keeps of the scaler.
struct LossScaleState {
  double scale = 1.0;
  int64_t good_steps = 0;     // clean steps since the scale last changed
  int64_t skipped_steps = 0;  // steps skipped for an overflow, over the whole run
  bool operator==(const LossScaleState& other) const {
    return scale == other.scale && good_steps == other.good_steps &&
           skipped_steps == other.skipped_steps;
  }
};

class LossScaler {
 public:
  LossScaler() = default;
  // Throws ConfigError naming a value out of range (init_scale > 0 and finite, growth_factor > 1,
  // 0 < backoff_factor < 1, growth_interval >= 1).
  LossScaler(const LossScaleOptions& options, bool enabled);

  bool enabled() const { return enabled_; }
  // The factor the loss is multiplied by before backward (1 when disabled).
  double scale() const { return enabled_ ? state_.scale : 1.0; }
  // The step's verdict: an overflow backs the scale off and counts a skipped step; a clean step
  // counts towards growth.
  void update(bool found_inf);

  const LossScaleState& state() const { return state_; }
  // Restores a saved state; throws InputError naming a scale that is not positive and finite.
  void load(const LossScaleState& state);

 private:
  LossScaleOptions options_;
  bool enabled_ = false;
  LossScaleState state_;
};

}  // namespace gpipe
