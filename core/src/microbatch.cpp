#include "gpipe/microbatch.h"

#include "gpipe/errors.h"

namespace gpipe {

std::vector<int64_t> microbatch_sizes(int64_t n, int64_t chunks) {
  GPIPE_CHECK(chunks >= 1, ConfigError,
              "chunks (M, the number of micro-batches) must be >= 1, got ", chunks);
  GPIPE_CHECK(n >= 1, InputError, "the batch is empty (0 samples); a step needs at least ", chunks,
              " sample(s), one per micro-batch");
  GPIPE_CHECK(chunks <= n, InputError, "cannot split a batch of ", n, " samples into ", chunks,
              " micro-batches: use chunks <= batch size (", n, ") or a larger batch");
  std::vector<int64_t> sizes(chunks, n / chunks);
  for (int64_t i = 0; i < n % chunks; ++i)
    ++sizes[i];
  return sizes;
}

std::vector<Activations> split_microbatches(const Activations& batch, int64_t chunks) {
  const auto sizes = microbatch_sizes(batch_size(batch), chunks);
  std::vector<Activations> out(chunks);
  for (const auto& t : batch) {
    int64_t offset = 0;
    for (int64_t m = 0; m < chunks; ++m) {
      const bool batched = t.defined() && t.dim() > 0;
      out[m].push_back(batched ? t.narrow(0, offset, sizes[m]) : t);
      offset += sizes[m];
    }
  }
  return out;
}

std::vector<torch::Tensor> split_microbatches(const torch::Tensor& batch, int64_t chunks) {
  GPIPE_CHECK(batch.defined() && batch.dim() > 0, InputError,
              "a batch must be a tensor with a batch dimension, got ",
              batch.defined() ? batch.sizes() : at::IntArrayRef{});
  std::vector<torch::Tensor> out;
  for (auto& a : split_microbatches(Activations{batch}, chunks))
    out.push_back(a[0]);
  return out;
}

Activations merge_microbatches(const std::vector<Activations>& outputs) {
  GPIPE_CHECK(!outputs.empty(), InputError, "nothing to merge: no micro-batch outputs");
  Activations merged;
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    std::vector<torch::Tensor> pieces;
    for (const auto& out : outputs) {
      GPIPE_CHECK(out.size() == outputs[0].size(), InputError,
                  "micro-batch outputs hold different numbers of tensors (", out.size(), " vs ",
                  outputs[0].size(), ")");
      pieces.push_back(out[i]);
    }
    merged.push_back(pieces[0].defined() ? torch::cat(pieces, 0) : torch::Tensor());
  }
  return merged;
}

}  // namespace gpipe
