// Pipeline: GPipe over K devices in one process.
//
//   gpipe::Pipeline pipe(layers, gpipe::PipelineOptions({3, 2})      // balance: layers per stage
//                                    .devices({"cpu:0", "cpu:1"})
//                                    .chunks(8)                      // M micro-batches
//                                    .checkpoint(gpipe::Checkpoint::kExceptLast)
//                                    .seed(1));
//   pipe.set_optimizer([](std::vector<torch::Tensor> params) {
//     return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
//   });
//   double loss = pipe.train_step(images, labels);
//   torch::Tensor logits = pipe.forward(images);                      // evaluation
//
// Why this file exists: it owns the stages, their worker threads, the transport between them
// and one optimizer per stage, and turns one mini-batch into one synchronous training step:
// split into micro-batches, run the schedule on every stage at once, then step. It checks every
// argument up front and never leaves a half-done step behind: a failing stage or a non-finite
// loss ends the step with gradients cleared and parameters untouched.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpipe/device.h"
#include "gpipe/executor.h"
#include "gpipe/layer.h"
#include "gpipe/loss.h"
#include "gpipe/schedule.h"
#include "gpipe/stage.h"
#include "gpipe/timeline.h"
#include "gpipe/transport.h"

namespace gpipe {

struct PipelineOptions {
  /* implicit */ PipelineOptions(std::vector<int64_t> balance) : balance_(std::move(balance)) {}
  // Number of consecutive layers on each of the K stages; sums to the number of layers.
  TORCH_ARG(std::vector<int64_t>, balance);
  // One device per stage ("cpu:N" virtual devices or "cuda:N"); empty means cpu:0 .. cpu:K-1.
  TORCH_ARG(std::vector<std::string>, devices) = {};
  // M: micro-batches per mini-batch.
  TORCH_ARG(int64_t, chunks) = 1;
  TORCH_ARG(Checkpoint, checkpoint) = Checkpoint::kExceptLast;
  TORCH_ARG(ScheduleKind, schedule) = ScheduleKind::kGPipe;
  // Seeds the per-(step, micro-batch, layer) generators of dropout and drop-path.
  TORCH_ARG(uint64_t, seed) = 0;
  // Intra-op threads of each device; 0 means 1 when K > 1 and every hardware thread when K = 1.
  TORCH_ARG(int, threads_per_device) = 0;
};

// Figures of the last step.
struct StepStats {
  double loss = 0;
  double seconds = 0;
  double bubble_fraction = 0;
  std::vector<int64_t> peak_bytes;             // per stage: peak bytes its device held
  std::vector<int64_t> peak_activation_bytes;  // per stage: that peak less the bytes before it
};

class Pipeline {
 public:
  using OptimizerFactory =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

  Pipeline(LayerList layers, PipelineOptions options, LossFn loss = cross_entropy_loss());
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // One optimizer per stage over that stage's parameters, created and stepped on its thread.
  void set_optimizer(const OptimizerFactory& factory);
  torch::optim::Optimizer& optimizer(int64_t stage);
  // Sets the learning rate of every parameter group of every stage's optimizer.
  void set_learning_rate(double lr);
  // Clips the global gradient norm (over all stages) to `max_norm` before each step; 0 is off.
  void set_grad_clip(double max_norm);

  // forward_backward, then every stage's optimizer steps and the step counter advances.
  // Returns the mini-batch mean loss.
  double train_step(const torch::Tensor& input, const torch::Tensor& target);
  double train_step(const Activations& input, const torch::Tensor& target);
  // Forward and backward of every micro-batch, gradients left in .grad (zeroed first).
  // Throws NonFiniteLossError, with gradients zeroed, if the loss is NaN or infinite.
  double forward_backward(const Activations& input, const torch::Tensor& target);
  // Evaluation: eval mode and no grad for the call, min(M, N) micro-batches, merged output.
  torch::Tensor forward(const torch::Tensor& input);
  Activations forward(const Activations& input);

  void zero_grad();
  void train(bool on = true);
  void eval() { train(false); }
  // Global L2 norm of all gradients.
  double grad_norm();

  const StepStats& last_step() const { return last_step_; }
  // Events of the last step.
  const Timeline& timeline() const { return timeline_; }

  // The step counter keys the dropout generators; a resumed run sets it back.
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  int64_t num_stages() const { return static_cast<int64_t>(stages_.size()); }
  const PipelineOptions& options() const { return options_; }
  const std::vector<DeviceSpec>& devices() const { return devices_; }
  const LayerList& layers() const { return layers_; }
  Stage& stage(int64_t s) { return *stages_.at(s); }
  std::vector<torch::Tensor> parameters() const;
  // "<layer index>.<name within the layer>", stable whatever the balance.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, torch::Tensor>> named_buffers() const;

  // Runs fn(stage) on every stage's thread at once; rethrows the first failure as StageError.
  void for_each_stage(const std::function<void(Stage&)>& fn);

 private:
  void run_step(const Schedule& schedule, StepData& data, std::vector<Activations>* outputs);
  void begin_memory_window();
  void end_memory_window();

  LayerList layers_;
  PipelineOptions options_;
  LossFn loss_;
  std::vector<DeviceSpec> devices_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers_;
  LocalTransport transport_;
  Schedule train_schedule_;
  Timeline timeline_;
  StepStats last_step_;
  std::vector<int64_t> window_start_bytes_;
  double grad_clip_ = 0;
  int64_t step_ = 0;
};

// Checks `balance` against the number of layers and returns the index of each stage's first
// layer. Throws ConfigError naming the values.
std::vector<int64_t> stage_offsets(const std::vector<int64_t>& balance, int64_t num_layers);

// Human-readable message of any exception (c10::Error without its C++ backtrace).
std::string describe_exception(const std::exception_ptr& error);

}  // namespace gpipe
