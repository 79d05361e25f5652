// The reference MLP: [Linear(width, width), ReLU] x depth, then Linear(width, classes).
//
// Why this file exists: it is the model of the engine's benchmark and tests (DESIGN.md's
// 2048-wide MLP), as a flat layer list: one layer per Linear, with the ReLU folded into the
// hidden ones, so a stage boundary can fall between any two Linears. Optional dropout and
// BatchNorm make the K-invariance and deferred-BatchNorm tests.
#pragma once

#include "gpipe/layer.h"

namespace gpipe::models {

struct MlpOptions {
  MlpOptions(int64_t in_features, int64_t width, int64_t depth, int64_t classes)
      : in_features_(in_features), width_(width), depth_(depth), classes_(classes) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, width);
  // Hidden Linear+ReLU layers; the classifier Linear comes on top.
  TORCH_ARG(int64_t, depth);
  TORCH_ARG(int64_t, classes);
  // Dropout after each hidden ReLU (gpipe::Dropout, deterministic per micro-batch).
  TORCH_ARG(double, dropout) = 0.0;
  // DeferredBatchNorm after each hidden Linear.
  TORCH_ARG(bool, batch_norm) = false;
};

// depth + 1 layers.
LayerList make_mlp(const MlpOptions& options);

}  // namespace gpipe::models
