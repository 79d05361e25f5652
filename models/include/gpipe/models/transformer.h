// Transformer-L: the decoder-only language model of GPipe's Table 1, as pipeline layers.
//
// Why this file exists: it is the sequence model GPipe scales to 83.9B parameters (Table 1: model
// dimension 2048, feed-forward 8192, 32 heads, vocabulary 32k, L = 3, 13, 103, ... layers). The
// layer list is
//
//   embedding, layer_0 .. layer_{L-1}, head                                (L + 2 layers)
//
// embedding: token embedding (vocab x d_model) plus fixed sinusoidal positions, then dropout;
// layer_i: pre-LayerNorm causal self-attention (fused QKV and output projections with biases)
// and a ReLU feed-forward block, each with dropout on its residual branch (and on attention
// weights and after the ReLU); head: a final LayerNorm and an untied output projection to
// `vocab` logits, (N, T, vocab), which core's cross_entropy_loss takes against (N, T) next
// tokens. With sinusoidal positions the parameter count is
//   2 d V + V + 2 d + L (4 d^2 + 2 d F + F + 9 d),
// 282.2M, 785.8M and 5.32B for L = 3, 13, 103 at the paper's dimensions. Every Linear is
// gpipe::Linear (fused gradient accumulation); dropout is gpipe::Dropout (deterministic per
// micro-batch).
#pragma once

#include "gpipe/models/model.h"

namespace gpipe::models {

struct TransformerOptions {
  explicit TransformerOptions(int64_t layers) : layers_(layers) {}
  TORCH_ARG(int64_t, layers);
  TORCH_ARG(int64_t, d_model) = 2048;
  TORCH_ARG(int64_t, ffn) = 8192;
  TORCH_ARG(int64_t, heads) = 32;
  TORCH_ARG(int64_t, vocab) = 32000;
  // Longest sequence the model takes (and sample_batch's length).
  TORCH_ARG(int64_t, seq_len) = 1024;
  TORCH_ARG(double, dropout) = 0.0;
};

// Throws ConfigError naming the value when a knob cannot work.
void validate(const TransformerOptions& options);

class TransformerBuilder : public ModelBuilder {
 public:
  // Layer i initialised from (init_seed, i), as every builder.
  explicit TransformerBuilder(TransformerOptions options, uint64_t init_seed = 0);

  std::string name() const override { return "transformer-l"; }
  int64_t num_layers() const override { return options_.layers() + 2; }
  std::string layer_name(int64_t i) const override;
  // Analytic (the formula above, per layer); tests check it against built layers.
  int64_t count_layer_parameters(int64_t i) const override;
  bool counts_analytically() const override { return true; }
  // Tokens (N, seq_len) uniform in [0, vocab) and their next tokens (N, seq_len).
  SampleBatch sample_batch(int64_t batch_size, uint64_t seed) const override;
  std::vector<int64_t> sample_shape() const override { return {options_.seq_len()}; }

  const TransformerOptions& options() const { return options_; }

 protected:
  LayerPtr make_layer(int64_t i) const override;

 private:
  TransformerOptions options_;
};

}  // namespace gpipe::models
