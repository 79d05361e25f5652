// Losses the last stage computes per micro-batch.
//
// Why this file exists: in a pipeline the loss is part of the last stage (its backward starts
// there), so the engine takes the loss as a function of the stage's output Activations and the
// micro-batch's target. The engine weights each micro-batch's mean loss by its share of the
// mini-batch, so the accumulated gradients equal the mini-batch mean's.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "gpipe/activations.h"

namespace gpipe {

// Mean loss over the micro-batch.
using LossFn = std::function<torch::Tensor(const Activations& output, const torch::Tensor& target)>;

// Cross-entropy of output[0] (logits, (N, C) or (N, T, C)) against class indices, with optional
// label smoothing (the paper's AmoebaNet recipe uses 0.1).
LossFn cross_entropy_loss(double label_smoothing = 0.0);

// Mean squared error of output[0] against target.
LossFn mse_loss();

}  // namespace gpipe
