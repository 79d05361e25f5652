// Activations: what flows across a stage boundary.
//
// Why this file exists: a pipeline stage boundary may carry several tensors (an AmoebaNet cell
// needs the outputs of the two previous cells; a Transformer block may carry a mask beside the
// hidden state), so layers map a short vector of tensors to a short vector of tensors. The
// helpers here are the boundary operations the stages apply to such vectors.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace gpipe {

using Activations = std::vector<torch::Tensor>;

// Batch size (dim 0) shared by every defined tensor; throws InputError when they differ or the
// vector holds no defined tensor with a batch dimension.
int64_t batch_size(const Activations& activations);

// The inputs of a stage: each tensor detached from the previous stage's graph and moved to
// `device`; floating-point tensors get requires_grad when `requires_grad` is set, so that
// backward produces the gradients to send back.
Activations detach_for_stage(const Activations& activations, const torch::Device& device,
                             bool requires_grad);

// Moves every defined tensor to `device` (no-op for tensors already there).
Activations to_device(const Activations& activations, const torch::Device& device);

// Total bytes of the defined tensors.
int64_t nbytes(const Activations& activations);

}  // namespace gpipe
