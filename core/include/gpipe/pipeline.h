// Pipeline: GPipe over K devices in one process.
//
//   gpipe::Pipeline pipe(layers, gpipe::PipelineOptions({3, 2})      // balance: layers per stage
//                                    .devices({"cpu:0", "cpu:1"})
//                                    .chunks(8)                      // M micro-batches
//                                    .checkpoint(gpipe::Checkpoint::kExceptLast)
//                                    .schedule(gpipe::ScheduleKind::kZBH1)
//                                    .seed(1));
//   pipe.set_optimizer([](std::vector<torch::Tensor> params) {
//     return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
//   });
//   double loss = pipe.train_step(images, labels);
//   torch::Tensor logits = pipe.forward(images);                      // evaluation
//
// Why this file exists: it owns the stages, their devices' worker threads, the transport between
// them and one optimizer per stage, and turns one mini-batch into one synchronous training step:
// split into micro-batches, run the lowered schedule on every device at once (gradients are
// zeroed inside it), then one more pass over the devices for the update (observers, clipping
// scale, optimizer step). It checks every argument up front and never leaves a half-done step
// behind: a failing stage or a non-finite loss ends the step with gradients cleared and
// parameters untouched.
//
// With v virtual stages per device (interleaved-1f1b, zbv) the model is cut into K*v stages in
// model order; `balance` still counts each device's layers, split evenly over its v stages, and
// device d holds stages d, d+K, ... (zbv: d and 2K-1-d).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpipe/device.h"
#include "gpipe/executor.h"
#include "gpipe/grad_reducer.h"
#include "gpipe/layer.h"
#include "gpipe/loss.h"
#include "gpipe/loss_scaler.h"
#include "gpipe/memory.h"
#include "gpipe/precision.h"
#include "gpipe/schedule.h"
#include "gpipe/stage.h"
#include "gpipe/step_collectives.h"
#include "gpipe/timeline.h"
#include "gpipe/transport.h"

namespace gpipe {

struct PipelineOptions {
  /* implicit */ PipelineOptions(std::vector<int64_t> balance) : balance_(std::move(balance)) {}
  // Layers on each of the K devices; sums to the number of layers. With v virtual stages each
  // entry must be a multiple of v.
  TORCH_ARG(std::vector<int64_t>, balance);
  // One device per stage ("cpu:N" virtual devices or "cuda:N"); empty means cpu:0 .. cpu:K-1.
  TORCH_ARG(std::vector<std::string>, devices) = {};
  // M: micro-batches per mini-batch.
  TORCH_ARG(int64_t, chunks) = 1;
  TORCH_ARG(Checkpoint, checkpoint) = Checkpoint::kExceptLast;
  TORCH_ARG(ScheduleKind, schedule) = ScheduleKind::kGPipe;
  // With schedule kCustom: the training schedule's compute actions (read_schedule in
  // schedule_file.h). Its devices, micro-batches, v and placement are the run's: the balance,
  // chunks and virtual_stages must agree with it.
  TORCH_ARG(std::shared_ptr<const Schedule>, program) = nullptr;
  // v, virtual stages per device; 0 means the schedule's default (2 for interleaved-1f1b,
  // looped-bfs and the V's, else 1).
  TORCH_ARG(int64_t, virtual_stages) = 0;
  // Layers of each of the K*v virtual stages, in model order, instead of an even split of each
  // device's balance entry; a device's stages must add up to its balance entry.
  TORCH_ARG(std::vector<int64_t>, stage_balance) = {};
  // Seeds the per-(step, micro-batch, layer) generators of dropout and drop-path.
  TORCH_ARG(uint64_t, seed) = 0;
  // Intra-op threads of each device; 0 means 1 when K > 1 and every hardware thread when K = 1.
  TORCH_ARG(int, threads_per_device) = 0;
  // With data-parallel replicas: gradients are summed in buckets of about this many MiB, each as
  // soon as its gradients are final (grad_reducer.h).
  TORCH_ARG(double, bucket_mb) = 25;
  // With data-parallel replicas: BatchNorm sums each micro-batch's statistics over the replicas
  // of its stage (batchnorm.h), so R replicas at global batch N train as one at N.
  TORCH_ARG(bool, sync_batchnorm) = false;
  // Report each device's peak bytes in every step's StepStats. On CPU this installs the memory
  // meter (memory.h) as LibTorch's allocator for the whole process; off, the pipeline leaves the
  // allocator alone and peak_bytes stay empty.
  TORCH_ARG(bool, measure_memory) = false;
  // In one process: delay each message between two devices as this link (in seconds; link.h)
  // would, to measure a table under the link it is projected with. Default: free, as CPU
  // virtual devices sharing memory are.
  TORCH_ARG(LinkModel, link) = {};
  // The dtype the stages compute in and send across boundaries (precision.h); master weights,
  // the optimizer, BatchNorm's statistics and the loss stay fp32.
  TORCH_ARG(Precision, precision) = Precision::kFp32;
  // The dynamic loss scale (loss_scaler.h): always on for fp16, on elsewhere only if enabled.
  TORCH_ARG(LossScaleOptions, loss_scale) = {};
};

// Where every layer goes: the K*v virtual stages in model order, their layers and devices.
struct PipelineLayout {
  int64_t devices = 0;                 // K
  int64_t virtual_stages = 1;          // v
  std::vector<int64_t> stage_balance;  // layers of each virtual stage
  std::vector<int64_t> stage_offset;   // global index of each virtual stage's first layer
  std::vector<int64_t> stage_device;   // device of each virtual stage

  int64_t num_stages() const { return static_cast<int64_t>(stage_balance.size()); }
  // Virtual stages of `device`, ascending.
  std::vector<int64_t> stages_of(int64_t device) const;
  // Global layer indices of `device`'s stages, in stage order (what a rank builds).
  std::vector<int64_t> layers_of(int64_t device) const;
};
// Throws ConfigError naming the values when the balance does not cover `num_layers`, has an
// empty device, or an entry that v does not divide (without a stage_balance that splits it).
PipelineLayout make_layout(const PipelineOptions& options, int64_t num_layers);

// Figures of the last step.
struct StepStats {
  double loss = 0;
  double seconds = 0;
  double bubble_fraction = 0;
  // With measure_memory, per local device: the peak bytes it held during the step's schedule,
  // and that peak less the bytes it held when the step began. Empty without.
  std::vector<int64_t> peak_bytes;
  std::vector<int64_t> peak_activation_bytes;
  GradReduceStats grad_reduce;  // the data-parallel all-reduce (zero without)
  // Bytes this process's devices sent to other devices: activations forward, gradients back.
  int64_t sent_bytes = 0;
  // The loss scale the step's backward ran with (1 without a scaler), and whether an overflow
  // on some stage of some replica skipped the update everywhere.
  double loss_scale = 1.0;
  bool skipped = false;
};

class Pipeline {
 public:
  using OptimizerFactory =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

  Pipeline(LayerList layers, PipelineOptions options, LossFn loss = cross_entropy_loss());
  // One device of a pipeline spread over processes: this process runs device `local_device`,
  // whose layers are `layers` (PipelineLayout::layers_of, in that order); messages go over
  // `transport`, step-wide reductions over `collectives`. `options.balance()` still describes
  // every device; `options.devices()` may list every device or just this one. Every process
  // calls train_step with the same batch size.
  Pipeline(LayerList layers, PipelineOptions options, int64_t local_device,
           std::unique_ptr<Transport> transport, StepCollectives* collectives,
           LossFn loss = cross_entropy_loss());
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // One optimizer per stage over that stage's parameters, created and stepped on its thread.
  void set_optimizer(const OptimizerFactory& factory);
  // The optimizer of local stage `stage` (global virtual stage index).
  torch::optim::Optimizer& optimizer(int64_t stage);
  bool has_optimizer() const { return !optimizers_.empty(); }
  // Sets the learning rate of every parameter group of every stage's optimizer.
  void set_learning_rate(double lr);
  // Clips the global gradient norm (over all stages) to `max_norm` before each step; 0 is off.
  void set_grad_clip(double max_norm);

  // forward_backward, then every stage's optimizer steps and the step counter advances.
  // Returns the mini-batch mean loss. With a loss scaler, a step whose gradients overflowed on
  // any stage of any replica changes no parameter anywhere (last_step().skipped); the counter
  // still advances.
  double train_step(const torch::Tensor& input, const torch::Tensor& target);
  double train_step(const Activations& input, const torch::Tensor& target);
  // Forward and backward of every micro-batch, gradients left in .grad (zeroed first; times the
  // loss scale with a scaler), deferred BatchNorm statistics committed. Throws NonFiniteLossError,
  // with gradients zeroed, if the loss is NaN or infinite.
  double forward_backward(const Activations& input, const torch::Tensor& target);
  // Evaluation: eval mode and no grad for the call, min(M, N) micro-batches, merged output
  // (undefined on a process that does not hold the last stage).
  torch::Tensor forward(const torch::Tensor& input);
  Activations forward(const Activations& input);

  void zero_grad();
  void train(bool on = true);
  void eval() { train(false); }
  // Global L2 norm of all gradients (over every stage, in every process).
  double grad_norm();
  // A deterministic checksum of every parameter of every stage, in float64: the sum over
  // parameters of sum(p) + sum(p^2). Equal checksums mean equal training, to rounding.
  double param_checksum();

  const StepStats& last_step() const { return last_step_; }
  // The dynamic loss scale; a resumed run restores its state with loss_scaler().load(...).
  LossScaler& loss_scaler() { return scaler_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  // With measure_memory: the peak bytes local device `i` held from the start of the last step
  // until now (the optimizer update included), unaffected by other pipelines on the device.
  int64_t peak_bytes_since_step_began(size_t i) const;
  // Events of the last step.
  const Timeline& timeline() const { return timeline_; }

  // The step counter keys the dropout generators; a resumed run sets it back.
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  // K, devices over every process.
  int64_t num_devices() const { return layout_.devices; }
  // K*v virtual stages over every process.
  int64_t num_stages() const { return layout_.num_stages(); }
  const PipelineLayout& layout() const { return layout_; }
  // The virtual stages this process runs, ascending: all, or one device's in a distributed run.
  const std::vector<int64_t>& local_stages() const { return local_stage_ids_; }
  bool holds_last_stage() const { return stage_ptrs_.back() != nullptr; }
  const PipelineOptions& options() const { return options_; }
  // The lowered training schedule every step runs.
  const Schedule& schedule() const { return train_schedule_; }
  // Devices this process runs.
  const std::vector<DeviceSpec>& devices() const { return devices_; }
  // Layers of the local stages, in stage order.
  const LayerList& layers() const { return layers_; }
  // Local stage by its global virtual stage index.
  Stage& stage(int64_t s);
  std::vector<torch::Tensor> parameters() const;
  // "<global layer index>.<name within the layer>", stable whatever the balance.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const {
    return named_tensors(/*buffers=*/false);
  }
  std::vector<std::pair<std::string, torch::Tensor>> named_buffers() const {
    return named_tensors(/*buffers=*/true);
  }

  // Runs fn(stage) for every local stage, each on its device's thread, the devices at once;
  // rethrows the first failure as DeviceError.
  void for_each_stage(const std::function<void(Stage&)>& fn);

 private:
  // Runs fn(local device index) on every local device's thread at once.
  void for_each_device(const std::function<void(size_t)>& fn);
  void build(int64_t first_device, int64_t count);
  // Every device of the pipeline (the options' or K virtual CPU devices), checked against the
  // layout; one given device serves all K when this process runs all of them (`count`).
  std::vector<DeviceSpec> resolve_devices(int64_t count) const;
  // Places every parameter and buffer on its stage's device (build's last step).
  void place_parameters();
  std::vector<std::pair<std::string, torch::Tensor>> named_tensors(bool buffers) const;
  // The schedule on every device, in one pass: zeroes gradients first when training, and
  // computes `squares_` (squared gradient norms per device) last when asked.
  void run_step(const Schedule& schedule, StepData& data, std::vector<Activations>* outputs,
                bool zero_grads, bool squares);
  // forward_backward without committing the observers: the step's loss.
  // With `reduce` the data-parallel reducer takes each stage's gradients as they become final.
  double run_training_schedule(const Activations& input, const torch::Tensor& target, bool squares,
                               bool reduce = false);
  void abort_step();
  // The squared L2 norm of every gradient over every stage of every process: squares_ from the
  // schedule pass, or (`reduced`) measured again after the data-parallel sum.
  double gradient_square(bool reduced);
  // Commits the observers, scales every gradient by `factor` and steps every optimizer.
  void apply_update(double factor);
  // Squared L2 norm of the gradients of local device `i`'s stages.
  double device_grad_square(size_t i) const;
  void begin_memory_window();
  void end_memory_window();

  LayerList layers_;
  PipelineOptions options_;
  LossFn loss_;
  PipelineLayout layout_;
  int64_t first_device_ = 0;
  std::vector<int64_t> local_stage_ids_;
  std::vector<DeviceSpec> devices_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::vector<std::unique_ptr<Stage>> stages_;      // local, ascending stage index
  std::vector<Stage*> stage_ptrs_;                  // every virtual stage; null if remote
  std::vector<std::vector<Stage*>> device_stages_;  // per local device
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers_;  // parallel to stages_
  std::unique_ptr<Transport> transport_;
  StepCollectives* collectives_ = nullptr;
  std::unique_ptr<GradientReducer> reducer_;  // with replicas; destroyed before collectives_
  Schedule train_schedule_;
  Timeline timeline_;
  StepStats last_step_;
  std::vector<double> squares_;  // per local device, from the last run_step that asked
  std::vector<memory::PeakWindow> memory_windows_;  // per local device, from the last step
  double grad_clip_ = 0;
  LossScaler scaler_;
  int64_t step_ = 0;
};

// Checks `balance` against the number of layers and returns the index of each entry's first
// layer. Throws ConfigError naming the values.
std::vector<int64_t> stage_offsets(const std::vector<int64_t>& balance, int64_t num_layers);

// Human-readable message of any exception (c10::Error without its C++ backtrace).
std::string describe_exception(const std::exception_ptr& error);

}  // namespace gpipe
