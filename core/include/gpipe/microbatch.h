// Splitting a mini-batch into micro-batches and merging the outputs back.
//
// Why this file exists: GPipe's speedup comes from cutting a mini-batch of N samples into M
// micro-batches that flow through the stages one after another. Sizes differ by at most one
// (the first N mod M get one sample more), the pieces are views (no copy), and merging
// concatenates in order, so merge(split(x)) == x.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "gpipe/activations.h"

namespace gpipe {

// Sizes of the M micro-batches of a batch of n samples. Throws InputError for n < 1 or M > n,
// and ConfigError for M < 1.
std::vector<int64_t> microbatch_sizes(int64_t n, int64_t chunks);

// Splits every tensor of `batch` along dim 0 into `chunks` views.
std::vector<Activations> split_microbatches(const Activations& batch, int64_t chunks);
std::vector<torch::Tensor> split_microbatches(const torch::Tensor& batch, int64_t chunks);

// Concatenates micro-batch outputs along dim 0, tensor by tensor.
Activations merge_microbatches(const std::vector<Activations>& outputs);

}  // namespace gpipe
