// Transformer-L's embedding, decoder layer and head, and the builder that lists them.
#include "gpipe/models/transformer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "gpipe/dropout.h"
#include "gpipe/errors.h"
#include "gpipe/linear.h"

namespace gpipe::models {
namespace {

const torch::Tensor& tokens_of(const Activations& inputs, int64_t seq_len, const char* layer) {
  GPIPE_CHECK(inputs.size() == 1 && inputs[0].dim() == 2 && inputs[0].scalar_type() == torch::kLong,
              ConfigError, "the Transformer ", layer, " takes one int64 token batch (N, T), got ",
              inputs.size(), " tensors");
  GPIPE_CHECK(inputs[0].size(1) <= seq_len, ConfigError, "sequence length ", inputs[0].size(1),
              " exceeds the model's seq_len ", seq_len);
  return inputs[0];
}

// sin/cos positions of Vaswani et al., (seq_len, d_model).
torch::Tensor sinusoidal_positions(int64_t seq_len, int64_t d_model) {
  auto position = torch::arange(seq_len, torch::kFloat).unsqueeze(1);
  auto rate = torch::exp(torch::arange(0, d_model, 2, torch::kFloat) *
                         (-std::log(10000.0) / static_cast<double>(d_model)));
  auto table = torch::zeros({seq_len, d_model});
  table.slice(1, 0, d_model, 2).copy_(torch::sin(position * rate));
  table.slice(1, 1, d_model, 2).copy_(torch::cos(position * rate));
  return table;
}

class TokenEmbedding : public Layer {
 public:
  TokenEmbedding(const TransformerOptions& o) : Layer("embedding"), seq_len_(o.seq_len()) {
    embedding_ = register_module("embedding", torch::nn::Embedding(o.vocab(), o.d_model()));
    positions_ = register_buffer("positions", sinusoidal_positions(o.seq_len(), o.d_model()));
    dropout_ = register_module("dropout", Dropout(o.dropout()));
  }
  Activations forward(const Activations& inputs) override {
    const auto& tokens = tokens_of(inputs, seq_len_, "embedding");
    auto h = embedding_(tokens) + positions_.slice(0, 0, tokens.size(1));
    return {dropout_(h)};
  }

 private:
  int64_t seq_len_;
  torch::nn::Embedding embedding_{nullptr};
  torch::Tensor positions_;
  Dropout dropout_{nullptr};
};

// Pre-LayerNorm decoder layer: x + attention(LN(x)), then h + FFN(LN(h)); (N, T, d) -> same.
class DecoderLayer : public Layer {
 public:
  DecoderLayer(std::string name, const TransformerOptions& o)
      : Layer(std::move(name)), heads_(o.heads()) {
    const int64_t d = o.d_model();
    norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    qkv_ = register_module("qkv", Linear(d, 3 * d));
    out_ = register_module("out", Linear(d, d));
    norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    ffn_in_ = register_module("ffn_in", Linear(d, o.ffn()));
    ffn_out_ = register_module("ffn_out", Linear(o.ffn(), d));
    attention_dropout_ = register_module("attention_dropout", Dropout(o.dropout()));
    relu_dropout_ = register_module("relu_dropout", Dropout(o.dropout()));
    residual_dropout_ = register_module("residual_dropout", Dropout(o.dropout()));
  }

  Activations forward(const Activations& inputs) override {
    GPIPE_CHECK(inputs.size() == 1 && inputs[0].dim() == 3, ConfigError, "Transformer layer '",
                label(), "' takes one hidden state (N, T, d), got ", inputs.size(), " tensors");
    const auto& x = inputs[0];
    auto h = x + residual_dropout_(attention(norm1_(x)));
    auto ffn = ffn_out_(relu_dropout_(torch::relu(ffn_in_(norm2_(h)))));
    return {h + residual_dropout_(ffn)};
  }

 private:
  torch::Tensor attention(const torch::Tensor& x) {
    const int64_t n = x.size(0), t = x.size(1), d = x.size(2), dh = d / heads_;
    // (N, T, 3d) -> 3 x (N, heads, T, dh)
    auto qkv = qkv_(x).view({n, t, 3, heads_, dh}).permute({2, 0, 3, 1, 4});
    auto q = qkv[0] * (1.0 / std::sqrt(static_cast<double>(dh)));
    auto scores = torch::matmul(q, qkv[1].transpose(-2, -1));  // (N, heads, T, T)
    auto future = torch::ones({t, t}, x.options().dtype(torch::kBool)).triu(1);
    scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
    auto weights = attention_dropout_(torch::softmax(scores, -1));
    auto context = torch::matmul(weights, qkv[2]);  // (N, heads, T, dh)
    return out_(context.transpose(1, 2).reshape({n, t, d}));
  }

  int64_t heads_;
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  Linear qkv_{nullptr}, out_{nullptr}, ffn_in_{nullptr}, ffn_out_{nullptr};
  Dropout attention_dropout_{nullptr}, relu_dropout_{nullptr}, residual_dropout_{nullptr};
};

// Final LayerNorm and the untied output projection: (N, T, d) -> logits (N, T, vocab).
class LanguageModelHead : public Layer {
 public:
  explicit LanguageModelHead(const TransformerOptions& o) : Layer("head") {
    norm_ =
        register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.d_model()})));
    projection_ = register_module("projection", Linear(o.d_model(), o.vocab()));
  }
  Activations forward(const Activations& inputs) override {
    GPIPE_CHECK(inputs.size() == 1 && inputs[0].dim() == 3, ConfigError,
                "the Transformer head takes one hidden state (N, T, d), got ", inputs.size(),
                " tensors");
    return {projection_(norm_(inputs[0]))};
  }

 private:
  torch::nn::LayerNorm norm_{nullptr};
  Linear projection_{nullptr};
};

}  // namespace

void validate(const TransformerOptions& o) {
  GPIPE_CHECK(o.layers() >= 1, ConfigError,
              "Transformer-L needs at least one layer, got layers (L) = ", o.layers());
  GPIPE_CHECK(o.d_model() >= 1 && o.ffn() >= 1 && o.vocab() >= 1 && o.seq_len() >= 1, ConfigError,
              "Transformer-L sizes must be positive, got d_model=", o.d_model(), " ffn=", o.ffn(),
              " vocab=", o.vocab(), " seq_len=", o.seq_len());
  GPIPE_CHECK(o.heads() >= 1 && o.d_model() % o.heads() == 0, ConfigError,
              "Transformer-L heads must divide the model dimension: d_model=", o.d_model(),
              " heads=", o.heads());
  GPIPE_CHECK(o.d_model() % 2 == 0, ConfigError,
              "Transformer-L's sinusoidal positions need an even d_model, got ", o.d_model());
  GPIPE_CHECK(o.dropout() >= 0 && o.dropout() < 1, ConfigError, "dropout must be in [0, 1), got ",
              o.dropout());
}

TransformerBuilder::TransformerBuilder(TransformerOptions options, uint64_t init_seed)
    : ModelBuilder(init_seed), options_(std::move(options)) {
  validate(options_);
}

std::string TransformerBuilder::layer_name(int64_t i) const {
  check_layer_index(i);
  if (i == 0) return "embedding";
  if (i == num_layers() - 1) return "head";
  return "layer_" + std::to_string(i - 1);
}

int64_t TransformerBuilder::count_layer_parameters(int64_t i) const {
  check_layer_index(i);
  const int64_t d = options_.d_model(), f = options_.ffn(), v = options_.vocab();
  if (i == 0) return v * d;
  if (i == num_layers() - 1) return 2 * d + d * v + v;
  return 4 * d * d + 2 * d * f + f + 9 * d;
}

LayerPtr TransformerBuilder::make_layer(int64_t i) const {
  if (i == 0) return std::make_shared<TokenEmbedding>(options_);
  if (i == num_layers() - 1) return std::make_shared<LanguageModelHead>(options_);
  return std::make_shared<DecoderLayer>(layer_name(i), options_);
}

SampleBatch TransformerBuilder::sample_batch(int64_t batch_size, uint64_t seed) const {
  GPIPE_CHECK(batch_size >= 1, ConfigError, "a sample batch needs at least one sample, got ",
              batch_size);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t t = options_.seq_len();
  auto tokens = torch::randint(0, options_.vocab(), {batch_size, t + 1}, generator,
                               torch::TensorOptions(torch::kLong));
  return {tokens.slice(1, 0, t).contiguous(), tokens.slice(1, 1, t + 1).contiguous()};
}

}  // namespace gpipe::models
