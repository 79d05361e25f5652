// One example and a batch of them.
//
// Why this file exists: it is the contract between the data area and the trainer. Images are
// (C, H, W) float32, normalised, with an int64 class label; a batch stacks them to (N, C, H, W)
// and (N). Token data is (T) int64 with the next tokens (T) int64 as target; a batch is (N, T)
// and (N, T).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace gpipe::datasets {

struct Example {
  torch::Tensor input;
  torch::Tensor target;  // 0-dim int64 class label, or (T) int64 next tokens
};

struct Batch {
  torch::Tensor input;   // (N, C, H, W) float32, or (N, T) int64 tokens
  torch::Tensor target;  // (N) int64 labels, or (N, T) int64 next tokens

  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

// Stacks examples along a new first dimension. Throws DataError for an empty list or examples
// whose shapes differ (naming the first that differs).
Batch collate(const std::vector<Example>& examples);

}  // namespace gpipe::datasets
