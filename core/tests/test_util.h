// Shared helpers of the engine tests: a small MLP built twice with the same initial weights,
// and the plain (no pipeline) full-batch reference of a training step.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <map>
#include <string>

#include "expect_error.h"
#include "gpipe/gpipe.h"
#include "gpipe/models/mlp.h"
#include "one_intra_op_thread.h"

namespace gpipe {
// Readable test parameters in gtest's output.
inline void PrintTo(Checkpoint mode, std::ostream* os) {
  *os << to_string(mode);
}
inline void PrintTo(ScheduleKind kind, std::ostream* os) {
  *os << to_string(kind);
}
}  // namespace gpipe

namespace gpipe::testing {

inline LayerList seeded_mlp(const models::MlpOptions& options, uint64_t init_seed = 7) {
  torch::manual_seed(init_seed);
  return models::make_mlp(options);
}

// An even balance of n layers over k stages.
inline std::vector<int64_t> even_balance(int64_t n, int64_t k) {
  std::vector<int64_t> balance(k, n / k);
  for (int64_t i = 0; i < n % k; ++i)
    ++balance[i];
  return balance;
}

struct Reference {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // by "<layer>.<name>"
};

// Loss and gradients of the plain model: layers applied in sequence to the whole batch.
inline Reference plain_step(const LayerList& layers, const torch::Tensor& input,
                            const torch::Tensor& target) {
  OneIntraOpThread one_thread;
  Activations x{input};
  for (const auto& layer : layers)
    x = layer->forward(x);
  auto loss = torch::nn::functional::cross_entropy(x[0], target);
  loss.backward();
  Reference ref;
  ref.loss = loss.item<double>();
  for (size_t i = 0; i < layers.size(); ++i) {
    for (const auto& item : layers[i]->named_parameters()) {
      ref.grads[std::to_string(i) + "." + item.key()] = item.value().grad().clone();
    }
  }
  return ref;
}

// The plain model trained as the paper defines a micro-batched step, without a pipeline: each
// micro-batch runs every layer in sequence under the same LayerContext keys the pipeline uses
// (so dropout draws the same masks and deferred BatchNorm sees the same micro-batches), its loss
// weighted by its share of the batch; then the BatchNorm statistics are committed. Gradients are
// left in .grad; returns the mini-batch loss. Under a low `precision` each micro-batch's layers
// run under autocast and the loss is taken in fp32 of the logits, as the pipeline does. The loss
// is `loss` (a model's own), or the cross-entropy.
inline double plain_microbatched_step(const LayerList& layers, const torch::Tensor& input,
                                      const torch::Tensor& target, int64_t M, uint64_t seed,
                                      int64_t step, Precision precision = Precision::kFp32,
                                      const LossFn& loss_fn = {}) {
  OneIntraOpThread one_thread;
  const auto inputs = split_microbatches(Activations{input}, M);
  const auto targets = split_microbatches(target, M);
  double total = 0;
  for (int64_t m = 0; m < M; ++m) {
    Activations x = inputs[m];
    for (size_t i = 0; i < layers.size(); ++i) {
      LayerContext context;
      context.seed = seed;
      context.step = step;
      context.microbatch = m;
      context.layer = static_cast<int64_t>(i);
      LayerContextGuard guard(&context);
      AutocastGuard autocast(precision, torch::kCPU);
      x = layers[i]->forward(x);
    }
    if (precision != Precision::kFp32) x = cast_floating(x, torch::kFloat);
    const double weight =
        static_cast<double>(targets[m].size(0)) / static_cast<double>(target.size(0));
    auto loss = (loss_fn ? loss_fn(x, targets[m])
                         : torch::nn::functional::cross_entropy(x[0], targets[m])) *
                weight;
    loss.backward();
    total += loss.item<double>();
  }
  for (const auto& layer : layers) {
    for (const auto& module : layer->modules(/*include_self=*/true)) {
      if (auto* observer = dynamic_cast<StepObserver*>(module.get())) observer->on_step_end();
    }
  }
  return total;
}

// Every parameter and buffer of the plain model by the pipeline's global name "<layer>.<name>".
inline std::map<std::string, torch::Tensor> named_tensors(const LayerList& layers) {
  std::map<std::string, torch::Tensor> named;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (const auto& item : layers[i]->named_parameters())
      named[std::to_string(i) + "." + item.key()] = item.value();
    for (const auto& item : layers[i]->named_buffers())
      named[std::to_string(i) + "." + item.key()] = item.value();
  }
  return named;
}

inline void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, double rtol,
                         double atol, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << " is undefined";
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const bool close = torch::allclose(actual, expected, rtol, atol);
  EXPECT_TRUE(close) << what << ": max abs diff " << (actual - expected).abs().max().item<double>();
}

}  // namespace gpipe::testing

namespace gpipe::testing {

// The identity on a parameter whose backward, in step `step`, returns inf: an fp16-style overflow
// in one layer's weight gradient alone (its input's gradient stays finite).
class OverflowFunction : public torch::autograd::Function<OverflowFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& weight,
                               bool overflow) {
    ctx->saved_data["overflow"] = overflow;
    return weight.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const bool overflow = ctx->saved_data["overflow"].toBool();
    return {overflow ? grads[0] * std::numeric_limits<float>::infinity() : grads[0],
            torch::Tensor()};
  }
};

// x * w, w initialised to ones, whose weight gradient overflows in training step `step`.
class OverflowLayer : public Layer {
 public:
  OverflowLayer(int64_t width, int64_t step) : Layer("overflow"), step_(step) {
    weight_ = register_parameter("weight", torch::ones({width}));
  }
  Activations forward(const Activations& x) override {
    const auto* context = current_layer_context();
    const bool overflow = context != nullptr && context->step == step_;
    return {x[0] * OverflowFunction::apply(weight_, overflow)};
  }

 private:
  int64_t step_;
  torch::Tensor weight_;
};

// `layers` with an OverflowLayer inserted before layer `at`.
inline LayerList with_overflow(LayerList layers, size_t at, int64_t width, int64_t step) {
  layers.insert(layers.begin() + static_cast<std::ptrdiff_t>(at),
                std::make_shared<OverflowLayer>(width, step));
  return layers;
}

}  // namespace gpipe::testing
