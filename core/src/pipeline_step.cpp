// Pipeline's step: the schedule pass and the update pass over the devices (declared in
// pipeline.h). A training step fans out to the device threads twice: once to zero the gradients
// and run the lowered schedule (and, without data parallelism, measure the gradients' norm), once
// to commit deferred BatchNorm statistics, scale the gradients by the clipping factor and step
// the optimizers. The loss stays a tensor until the schedule pass ends.
#include <cmath>

#include "gpipe/errors.h"
#include "gpipe/lowering.h"
#include "gpipe/memory.h"
#include "gpipe/microbatch.h"
#include "gpipe/pipeline.h"

namespace gpipe {

double Pipeline::device_grad_square(size_t i) const {
  double sum = 0;
  for (const Stage* stage : device_stages_[i]) {
    for (const auto& p : stage->parameters()) {
      if (p.grad().defined()) sum += p.grad().to(torch::kDouble).square().sum().item<double>();
    }
  }
  return sum;
}

void Pipeline::zero_grad() {
  // Zeroed in place rather than freed: gradient buffers are then allocated once, like optimizer
  // state, and a step's activation peak measures activations only.
  for_each_stage([](Stage& stage) {
    for (auto& p : stage.parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  });
}

double Pipeline::grad_norm() {
  squares_.assign(workers_.size(), 0.0);
  for_each_device([&](size_t i) { squares_[i] = device_grad_square(i); });
  double total = 0;
  for (double s : squares_)
    total += s;
  if (collectives_ != nullptr) total = collectives_->sum_over_stages(total);
  return std::sqrt(total);
}

double Pipeline::param_checksum() {
  double total = 0;
  for (const auto& stage : stages_) {
    for (const auto& p : stage->parameters()) {
      const auto d = p.detach().to(torch::kDouble);
      total += d.sum().item<double>() + d.square().sum().item<double>();
    }
  }
  if (collectives_ != nullptr) total = collectives_->sum_over_stages(total);
  return total;
}

void Pipeline::run_step(const Schedule& schedule, StepData& data, std::vector<Activations>* outputs,
                        bool zero_grads, bool squares) {
  transport_->reset();
  timeline_.clear();
  squares_.assign(workers_.size(), 0.0);
  const auto start = Timeline::Clock::now();
  begin_memory_window();
  try {
    for_each_device([&](size_t i) {
      if (zero_grads) {
        for (Stage* stage : device_stages_[i]) {
          for (auto& p : stage->parameters()) {
            if (p.grad().defined()) p.mutable_grad().zero_();
          }
        }
      }
      run_device_actions(first_device_ + static_cast<int64_t>(i), schedule, stage_ptrs_, data,
                         *transport_, &timeline_, outputs);
      if (squares) squares_[i] = device_grad_square(i);
    });
  } catch (...) {
    for (auto& stage : stages_)
      stage->clear();
    end_memory_window();
    throw;
  }
  end_memory_window();
  last_step_.seconds = std::chrono::duration<double>(Timeline::Clock::now() - start).count();
  auto events = timeline_.events();
  for (auto& e : events)
    e.stage -= first_device_;  // over the devices this process runs
  last_step_.bubble_fraction = bubble_fraction(events, static_cast<int64_t>(workers_.size()));
}

void Pipeline::abort_step() {
  if (reducer_ != nullptr) reducer_->cancel();  // before zeroing what it may be copying into
  for_each_stage([](Stage& stage) {
    for (auto* observer : stage.step_observers())
      observer->on_step_abort();
    for (auto& p : stage.parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  });
}

double Pipeline::run_training_schedule(const Activations& input, const torch::Tensor& target,
                                       bool squares, bool reduce) {
  const int64_t n = batch_size(input);
  GPIPE_CHECK(target.defined() && target.dim() > 0, InputError,
              "the target must be a tensor with a batch dimension");
  GPIPE_CHECK(target.size(0) == n, InputError, "input batch size ", n,
              " differs from target batch size ", target.size(0),
              "; every sample needs exactly one target");
  const int64_t M = options_.chunks();
  const auto sizes = microbatch_sizes(n, M);
  // Weights are shares of the whole mini-batch over every replica, so that summing gradients
  // over replicas gives the mini-batch mean.
  const int64_t global_n = collectives_ != nullptr ? collectives_->global_batch(n) : n;

  StepData data;
  data.step = step_;
  data.seed = options_.seed();
  data.training = true;
  data.loss = &loss_;
  data.inputs = split_microbatches(input, M);
  data.targets = split_microbatches(target, M);
  for (int64_t size : sizes)
    data.weights.push_back(static_cast<double>(size) / global_n);
  if (reduce && reducer_ != nullptr) {
    data.reducer = reducer_.get();
    reducer_->begin_step();
  }

  try {
    run_step(train_schedule_, data, nullptr, /*zero_grads=*/true, squares);
  } catch (...) {
    abort_step();
    throw;
  }
  double loss = holds_last_stage() ? stage_ptrs_.back()->loss_sum() : 0.0;
  bool finite = std::isfinite(loss);
  if (collectives_ != nullptr) std::tie(loss, finite) = collectives_->reduce_loss(loss, finite);
  last_step_.loss = loss;
  if (!finite || !std::isfinite(loss)) {
    // Every replica refuses this step, but their buckets are already under way: let them all
    // finish, so that no replica waits in a collective the others have given up.
    if (data.reducer != nullptr) reducer_->finish();
    abort_step();
    throw NonFiniteLossError(
        c10::str("the loss of step ", step_, " is ", loss,
                 "; the step was refused and the parameters are unchanged (lower the learning "
                 "rate, or enable gradient clipping)"),
        loss);
  }
  return loss;
}

double Pipeline::forward_backward(const Activations& input, const torch::Tensor& target) {
  const double loss = run_training_schedule(input, target, /*squares=*/false);
  for_each_stage([](Stage& stage) {
    for (auto* observer : stage.step_observers())
      observer->on_step_end();
  });
  return loss;
}

double Pipeline::train_step(const torch::Tensor& input, const torch::Tensor& target) {
  return train_step(Activations{input}, target);
}

double Pipeline::train_step(const Activations& input, const torch::Tensor& target) {
  GPIPE_CHECK(!optimizers_.empty(), ConfigError,
              "train_step needs an optimizer: call set_optimizer first");
  // Without replicas the schedule pass measures each device's gradient norm as it ends.
  const bool reduce = collectives_ != nullptr;
  const double loss = run_training_schedule(input, target, grad_clip_ > 0 && !reduce, reduce);
  double scale = 1.0;
  last_step_.grad_reduce = {};
  if (reducer_ != nullptr) {
    try {
      last_step_.grad_reduce = reducer_->finish();
    } catch (...) {
      abort_step();
      throw;
    }
  }
  if (grad_clip_ > 0) {
    double total = 0;
    if (reduce) {
      // The reduced gradients, summed over every stage of every process.
      for (size_t i = 0; i < workers_.size(); ++i)
        total += device_grad_square(i);
      total = collectives_->sum_over_stages(total);
    } else {
      for (double s : squares_)
        total += s;
    }
    const double norm = std::sqrt(total);
    if (norm > grad_clip_) scale = grad_clip_ / (norm + 1e-6);
  }
  for_each_stage([&](Stage& stage) {
    for (auto* observer : stage.step_observers())
      observer->on_step_end();
    if (scale != 1.0) {
      for (auto& p : stage.parameters()) {
        if (p.grad().defined()) p.mutable_grad().mul_(scale);
      }
    }
    optimizer(stage.index()).step();
  });
  ++step_;
  return loss;
}

torch::Tensor Pipeline::forward(const torch::Tensor& input) {
  auto output = forward(Activations{input});
  return output.empty() ? torch::Tensor() : output[0];
}

Activations Pipeline::forward(const Activations& input) {
  const int64_t n = batch_size(input);
  GPIPE_CHECK(n >= 1, InputError, "the batch is empty (0 samples)");
  const int64_t M = std::min(options_.chunks(), n);
  std::vector<bool> modes;
  for (const auto& layer : layers_)
    modes.push_back(layer->is_training());
  train(false);
  StepData data;
  data.step = step_;
  data.seed = options_.seed();
  data.training = false;
  data.inputs = split_microbatches(input, M);
  std::vector<Activations> outputs(M);
  if (!holds_last_stage()) outputs.clear();
  const auto schedule =
      lower(make_forward_schedule(options_.schedule(), num_devices(), M, layout_.virtual_stages),
            Checkpoint::kNever);
  try {
    run_step(schedule, data, holds_last_stage() ? &outputs : nullptr, false, false);
  } catch (...) {
    for (size_t i = 0; i < layers_.size(); ++i)
      layers_[i]->train(modes[i]);
    throw;
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->train(modes[i]);
  if (!holds_last_stage()) return {};  // the outputs are another process's
  return merge_microbatches(outputs);
}

}  // namespace gpipe
