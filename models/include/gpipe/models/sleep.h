// The sleep model: layers that take a fixed time whatever the micro-batch size.
//
// Why this file exists: a schedule's shape (bubble, overlap, order) should be measurable on any
// machine, however many cores it has. Each layer sleeps `forward_ms` in forward (and in a
// recompute) and 2 x forward_ms in backward, then scales its input by one learnable scalar, so
// the pipeline still has gradients to pass and parameters to update. Sleeping threads need no
// core, so K stages overlap perfectly even on a 2-core machine.
#pragma once

#include "gpipe/layer.h"

namespace gpipe::models {

struct SleepOptions {
  SleepOptions(int64_t layers, double forward_ms) : layers_(layers), forward_ms_(forward_ms) {}
  TORCH_ARG(int64_t, layers);
  TORCH_ARG(double, forward_ms);
  // Backward time as a multiple of forward time.
  TORCH_ARG(double, backward_factor) = 2.0;
};

LayerList make_sleep_model(const SleepOptions& options);

}  // namespace gpipe::models
