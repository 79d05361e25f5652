// StepCollectives: what a pipeline spread over processes needs from the others in a step.
//
// Why this file exists: the Pipeline calls these few sums (batch size, loss, gradient norms,
// data-parallel gradient buckets) without knowing c10d, and distributed.h implements them without
// needing the whole Pipeline; this interface is all the two share.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace gpipe {

// The in-process pipeline has none; distributed::Context implements it on c10d.
class StepCollectives {
 public:
  virtual ~StepCollectives() = default;
  // Mini-batch size summed over the data-parallel replicas.
  virtual int64_t global_batch(int64_t local) = 0;
  // The step's loss (sum of every last stage's weighted micro-batch losses) and whether every
  // rank's loss was finite.
  virtual std::pair<double, bool> reduce_loss(double local_partial, bool local_ok) = 0;
  // R, the data-parallel replicas of each stage.
  virtual int64_t replicas() const = 0;
  // Sums one flat gradient bucket over the replicas of this stage, in place, blocking. Called
  // from GradientReducer's communication thread while the step's other collectives run.
  virtual void sum_gradient_bucket(torch::Tensor& flat) = 0;
  // Sums per-channel BatchNorm statistics over the replicas of this stage, in place, blocking,
  // on a group of their own (the buckets may be summing meanwhile). Synchronised BatchNorm only.
  virtual void sum_batchnorm_statistics(torch::Tensor& statistics) = 0;
  // Sums a per-stage value over the pipeline's stages (e.g. squared gradient norms).
  virtual double sum_over_stages(double local) = 0;
  // Why the step was aborted by another process, if it was.
  virtual std::string abort_reason() const = 0;
};

}  // namespace gpipe
