// Helpers of the model tests: running a layer list, the plain-model reference of a pipeline
// step (micro-batch by micro-batch, so BatchNorm sees what it sees in the pipeline), and the
// transparency and K-invariance checks every paper model goes through.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "gpipe/gpipe.h"
#include "gpipe/models/model.h"
#include "one_intra_op_thread.h"
#include "split_check.h"

namespace gpipe::models::testing {

// fn throws ConfigError whose message contains `part`.
inline void expect_config_error(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "'" << e.what() << "' does not contain '" << part << "'";
    return;
  }
  ADD_FAILURE() << "no ConfigError (expected one containing '" << part << "')";
}

// x through every layer in order.
inline Activations run_layers(const LayerList& layers, Activations x) {
  for (const auto& layer : layers)
    x = layer->forward(x);
  return x;
}

// n layers over k stages, the first n mod k stages one layer longer.
inline std::vector<int64_t> even_balance(int64_t n, int64_t k) {
  std::vector<int64_t> balance(static_cast<size_t>(k), n / k);
  for (int64_t i = 0; i < n % k; ++i)
    ++balance[static_cast<size_t>(i)];
  return balance;
}

inline void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, double rtol,
                         double atol, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << " is undefined";
  ASSERT_TRUE(expected.defined()) << what << " (expected) is undefined";
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(torch::allclose(actual, expected, rtol, atol))
      << what << ": max abs diff " << (actual - expected).abs().max().item<double>()
      << ", max abs expected " << expected.abs().max().item<double>();
}

struct Reference {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // "<layer index>.<parameter name>"
};

// The plain model's loss and gradients for what a pipeline with `chunks` micro-batches computes:
// each micro-batch runs through the layers on its own (BatchNorm normalises by its statistics),
// and its mean loss is weighted by its share of the batch.
inline Reference plain_step(const LayerList& layers, const torch::Tensor& input,
                            const torch::Tensor& target, const LossFn& loss_fn, int64_t chunks) {
  gpipe::testing::OneIntraOpThread one_thread;
  const auto inputs = split_microbatches(input, chunks);
  const auto targets = split_microbatches(target, chunks);
  Reference ref;
  for (size_t m = 0; m < inputs.size(); ++m) {
    const double share = static_cast<double>(inputs[m].size(0)) / input.size(0);
    auto loss = loss_fn(run_layers(layers, {inputs[m]}), targets[m]) * share;
    loss.backward();
    ref.loss += loss.item<double>();
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    for (const auto& item : layers[i]->named_parameters()) {
      ref.grads[std::to_string(i) + "." + item.key()] = item.value().grad().clone();
    }
  }
  return ref;
}

// How expect_transparent runs the pipeline.
struct PipelineRun {
  ScheduleKind schedule = ScheduleKind::kGPipe;
  Checkpoint checkpoint = Checkpoint::kExceptLast;
  bool eval_mode = false;  // every layer in eval mode (BatchNorm on running statistics)
};

// `num_layers` layers as `kind` places them on K devices: an even split into K x v stages, and
// the balance that sums each device's stages.
inline PipelineOptions placed(ScheduleKind kind, int64_t num_layers, int64_t K) {
  const int64_t v = default_virtual_stages(kind);
  const auto stages = even_balance(num_layers, K * v);
  return PipelineOptions(sum_per_device(kind, K, stages)).stage_balance(stages).schedule(kind);
}

// A K-device pipeline of `builder`'s model (even stages, M micro-batches, one thread a device)
// computes the same loss and gradients as the plain model. Both are built from the builder, so
// this also checks that two builds give the same weights.
inline void expect_transparent(const ModelBuilder& builder, int64_t K, int64_t M, int64_t N,
                               double rtol, double atol, const PipelineRun& run = {}) {
  SCOPED_TRACE(builder.name() + " K=" + std::to_string(K) + " M=" + std::to_string(M) + " " +
               to_string(run.schedule) + " checkpoint " + to_string(run.checkpoint) +
               (run.eval_mode ? " eval" : " train"));
  const auto batch = builder.sample_batch(N, /*seed=*/17);
  auto plain = builder.build();
  for (auto& layer : plain)
    layer->train(!run.eval_mode);
  const auto ref = plain_step(plain, batch.input, batch.target, builder.loss(), M);

  Pipeline pipe(builder.build(),
                placed(run.schedule, builder.num_layers(), K)
                    .chunks(M)
                    .checkpoint(run.checkpoint)
                    .threads_per_device(1),
                builder.loss());
  pipe.train(!run.eval_mode);
  const double loss = pipe.forward_backward({batch.input}, batch.target);
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::abs(ref.loss) + 1e-6);
  const auto named = pipe.named_parameters();
  ASSERT_EQ(named.size(), ref.grads.size());
  for (const auto& [name, param] : named)
    expect_close(param.grad(), ref.grads.at(name), rtol, atol, name);
}

// Every schedule that takes K = 2 and M, under every re-materialisation mode (the zero-bubble
// ones split every layer's backward into B and W: backward_split.h).
inline void expect_transparent_under_every_schedule(const ModelBuilder& builder, int64_t M,
                                                    int64_t N, double rtol, double atol) {
  for (auto kind : all_schedule_kinds()) {
    if (!schedule_shape_error(kind, 2, M, default_virtual_stages(kind)).empty()) continue;
    for (auto checkpoint : {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever})
      expect_transparent(builder, 2, M, N, rtol, atol, {kind, checkpoint});
  }
}

// Each layer of the model on its own, as expect_split_matches (split_check.h) checks it. The
// first layer takes data (its input needs no gradient), the others activations.
inline void expect_every_layer_splits(const ModelBuilder& builder, int64_t N, double rtol,
                                      double atol) {
  auto whole = builder.build();
  auto split = builder.build();
  const auto batch = builder.sample_batch(N, /*seed=*/5);
  Activations x{batch.input};
  for (size_t i = 0; i < whole.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i) + " (" + whole[i]->label() + ")");
    const auto input_whole = detach_for_stage(x, torch::kCPU, /*requires_grad=*/i > 0);
    const auto input_split = detach_for_stage(x, torch::kCPU, /*requires_grad=*/i > 0);
    const auto y_whole = whole[i]->forward(input_whole);
    const auto y_split = split[i]->forward(input_split);
    std::vector<torch::Tensor> roots_whole, roots_split, grads;
    torch::manual_seed(static_cast<uint64_t>(i));
    for (size_t j = 0; j < y_whole.size(); ++j) {
      if (!y_whole[j].defined() || !y_whole[j].requires_grad()) continue;
      roots_whole.push_back(y_whole[j]);
      roots_split.push_back(y_split[j]);
      grads.push_back(torch::randn_like(y_whole[j]));
    }
    torch::autograd::backward(roots_whole, grads);
    std::vector<torch::Tensor> expected_inputs, expected_parameters;
    for (const auto& t : input_whole)
      expected_inputs.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    for (const auto& p : whole[i]->parameters())
      expected_parameters.push_back(p.grad());
    gpipe::testing::expect_split_matches(roots_split, grads, input_split, split[i]->parameters(),
                                         gpipe::testing::parameters_kept_in_b(*split[i]),
                                         expected_inputs, expected_parameters, rtol, atol);
    x.clear();
    for (const auto& t : y_whole)
      x.push_back(t.defined() ? t.detach() : t);
  }
}

// Losses of `steps` SGD steps of a K-stage pipeline with M micro-batches and dropout seed 5.
inline std::vector<double> pipeline_losses(const ModelBuilder& builder, int64_t K, int64_t M,
                                           int64_t N, int steps) {
  Pipeline pipe(builder.build(),
                PipelineOptions(even_balance(builder.num_layers(), K))
                    .chunks(M)
                    .seed(5)
                    .threads_per_device(1),
                builder.loss());
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  });
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const auto batch = builder.sample_batch(N, /*seed=*/100 + static_cast<uint64_t>(step));
    losses.push_back(pipe.train_step(batch.input, batch.target));
  }
  return losses;
}

// Training with K = 2 and 4 gives the losses of K = 1 at the same M, with dropout on; and
// dropout does change them (so the check is not vacuous).
inline void expect_k_invariant(const ModelBuilder& with_dropout,
                               const ModelBuilder& without_dropout, int64_t M, int64_t N,
                               int steps) {
  const auto k1 = pipeline_losses(with_dropout, 1, M, N, steps);
  for (int64_t K : {2, 4}) {
    const auto other = pipeline_losses(with_dropout, K, M, N, steps);
    ASSERT_EQ(other.size(), k1.size());
    for (size_t i = 0; i < k1.size(); ++i)
      EXPECT_NEAR(other[i], k1[i], 1e-5 * std::abs(k1[i])) << "K=" << K << " step " << i;
  }
  const auto plain = pipeline_losses(without_dropout, 2, M, N, 1);
  EXPECT_GT(std::abs(plain[0] - k1[0]), 1e-4) << "dropout changed nothing";
}

// One optimizer step on a sample batch: the loss is finite, every parameter gets a finite
// gradient and the parameters move; then `steps` more Adam steps on the same batch lower the
// loss (the model can fit what it sees).
inline void expect_trains(const ModelBuilder& builder, int64_t N, int steps, double lr) {
  auto layers = builder.build();
  std::vector<torch::Tensor> params;
  for (const auto& layer : layers) {
    layer->train();
    for (const auto& p : layer->parameters())
      params.push_back(p);
  }
  torch::optim::Adam adam(params, torch::optim::AdamOptions(lr));
  const auto batch = builder.sample_batch(N, /*seed=*/3);
  const auto loss_fn = builder.loss();
  std::vector<torch::Tensor> before;
  for (const auto& p : params)
    before.push_back(p.detach().clone());

  double first = 0, last = 0;
  for (int step = 0; step <= steps; ++step) {
    adam.zero_grad();
    auto loss = loss_fn(run_layers(layers, {batch.input}), batch.target);
    ASSERT_TRUE(std::isfinite(loss.item<double>())) << "step " << step;
    loss.backward();
    if (step == 0) {
      first = loss.item<double>();
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_TRUE(params[i].grad().defined()) << "parameter " << i << " got no gradient";
        EXPECT_TRUE(params[i].grad().isfinite().all().item<bool>()) << "parameter " << i;
      }
    }
    last = loss.item<double>();
    adam.step();
  }
  int64_t moved = 0;
  for (size_t i = 0; i < params.size(); ++i)
    moved += torch::equal(params[i], before[i]) ? 0 : 1;
  EXPECT_EQ(moved, static_cast<int64_t>(params.size())) << "parameters that did not move";
  EXPECT_LT(last, 0.8 * first) << "first " << first << " last " << last;
}

}  // namespace gpipe::models::testing
