// Deferred BatchNorm: per-micro-batch statistics, running statistics per mini-batch.
//
// Why this file exists: in a pipeline, BatchNorm sees one micro-batch at a time. Normalising by
// the micro-batch's own statistics is what the paper does, but updating the running mean and
// variance after every micro-batch would weigh them M times and a recompute would count a
// micro-batch twice. This module accumulates the statistics of every micro-batch of a step
// (the mean and variance the normalisation itself computed, merged by Chan's parallel merge in
// float64) and updates the running statistics once, at the end of
// the step, as if it had seen the whole mini-batch. Recomputes are not counted. Called outside
// a pipeline it behaves like torch::nn::BatchNorm{1,2}d.
//
// Synchronised (the layer's LayerContext carries the stage's replicas; PipelineOptions::
// sync_batchnorm): each micro-batch is normalised by its statistics over every replica (its
// slice on each; LoaderOptions::shard_microbatches), the backward sums its two reductions over
// the replicas as well, and the running statistics merge those global statistics, so R
// replicas at global batch N train as one replica at N. Every replica runs the same schedule,
// so the sums happen in the same order everywhere.
#pragma once

#include <torch/torch.h>

#include "gpipe/layer.h"

namespace gpipe {

struct DeferredBatchNormOptions {
  /* implicit */ DeferredBatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  TORCH_ARG(int64_t, num_features);
  TORCH_ARG(double, eps) = 1e-5;
  // Weight of the new statistics; nullopt means a cumulative average, as in LibTorch.
  TORCH_ARG(c10::optional<double>, momentum) = 0.1;
  TORCH_ARG(bool, affine) = true;
};

class DeferredBatchNormImpl : public torch::nn::Cloneable<DeferredBatchNormImpl>,
                              public StepObserver {
 public:
  explicit DeferredBatchNormImpl(const DeferredBatchNormOptions& options);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  // input: (N, C), (N, C, L) or (N, C, H, W).
  torch::Tensor forward(const torch::Tensor& input);

  // Updates the running statistics from every micro-batch seen since the last call.
  void on_step_end() override;
  // Forgets the statistics accumulated in a step that failed.
  void on_step_abort() override;

  DeferredBatchNormOptions options;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  torch::Tensor forward_synchronised(const torch::Tensor& input);
  // Merges a micro-batch's statistics, as the normalisation computed them (its mean and
  // 1/sqrt(var + eps), per channel).
  void accumulate(const torch::Tensor& input, const torch::Tensor& mean,
                  const torch::Tensor& invstd);
  // Chan's merge of n samples' per-channel mean and sum of squared deviations into the step's.
  void merge(const torch::Tensor& mean, const torch::Tensor& m2, int64_t n);

  // Accumulated over the micro-batches of the current step (float64, one entry per channel).
  int64_t count_ = 0;
  torch::Tensor mean_, m2_;
};
TORCH_MODULE(DeferredBatchNorm);

}  // namespace gpipe
