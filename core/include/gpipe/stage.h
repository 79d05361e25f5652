// Stage: one partition of the layers, with stage-local autograd.
//
// Why this file exists: there is no autograd graph across stages. A stage runs forward on
// inputs it received (detached, with requires_grad), keeps what its backward needs, and on
// B(m) calls torch::autograd::backward on its own outputs with the gradients it received; the
// gradients of its inputs go to the previous stage. This lets backward run in parallel across
// CPU virtual devices, lets any schedule run, and works unchanged when stages are processes.
//
// Precision (precision.h): F and R run the layers under autocast; what leaves a stage is cast to
// the compute dtype (and back to fp32 as the next stage's layers take it, inside the graph, so
// both the message and its gradient are half size), the last stage's loss is computed in fp32 and
// its backward starts from the loss times the loss scale (1 unless fp16 scales it).
//
// Re-materialisation: a checkpointed forward runs under NoGradGuard and keeps only its input;
// recompute(m) replays it with grad on (same RNG draws, BatchNorm statistics not counted again)
// just before the backward needs it.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "gpipe/backward_split.h"
#include "gpipe/device.h"
#include "gpipe/layer.h"
#include "gpipe/loss.h"
#include "gpipe/precision.h"

namespace gpipe {

// Which micro-batches keep only their input in forward and recompute before backward.
enum class Checkpoint { kAlways, kExceptLast, kNever };
Checkpoint parse_checkpoint(const std::string& name);  // "always" | "except_last" | "never"
std::string to_string(Checkpoint mode);

class Stage {
 public:
  // `first_layer`: global index of layers[0] in the whole pipeline (keys the RNG).
  Stage(int64_t index, int64_t num_stages, LayerList layers, int64_t first_layer,
        DeviceSpec device);

  // Starts a training or evaluation step over `microbatches` micro-batches.
  void begin_step(int64_t step, int64_t microbatches, uint64_t seed);

  // F(m). Runs the layers (and, on the last stage, the loss against `target` weighted by
  // `weight`). Keeps the graph, or only the input when `checkpoint` is set. Returns the outputs,
  // detached, to send on.
  Activations forward(int64_t m, const Activations& input, bool checkpoint,
                      const torch::Tensor& target = {}, double weight = 1.0,
                      const LossFn* loss = nullptr);
  // R(m): replays a checkpointed forward with grad on.
  void recompute(int64_t m);
  // B(m): backward from the received output gradients (ignored on the last stage, which starts
  // from its loss). Returns the gradients of the stage's inputs. A checkpointed F(m) needs its
  // R(m) first: without it B throws InternalError (lower() places every R). With `defer_weights`
  // B computes only the input gradients and leaves the weight gradients for backward_weight(m)
  // (backward_split.h: every layer splits); otherwise the micro-batch is freed.
  Activations backward(int64_t m, const Activations& grad_output, bool defer_weights = false);
  // W(m): the weight gradients a split B(m) deferred; frees the micro-batch.
  void backward_weight(int64_t m);
  // Evaluation forward: no grad, nothing kept.
  Activations infer(int64_t m, const Activations& input);

  // Sum of the weighted micro-batch losses of this step (last stage only). Kept as a tensor
  // while the step runs (no device sync per micro-batch); read once.
  double loss_sum() const { return loss_sum_.defined() ? loss_sum_.item<double>() : 0.0; }
  // Drops whatever a failed step left behind.
  void clear();

  int64_t index() const { return index_; }
  bool is_first() const { return index_ == 0; }
  bool is_last() const { return index_ == num_stages_ - 1; }
  int64_t num_stages() const { return num_stages_; }
  const DeviceSpec& device() const { return device_; }
  const LayerList& layers() const { return layers_; }
  int64_t first_layer() const { return first_layer_; }
  std::vector<torch::Tensor> parameters() const;
  // Synchronised BatchNorm: this stage's BatchNorm layers sum their statistics over the
  // replicas through `replicas` (null: per replica, the default).
  void set_batchnorm_replicas(StepCollectives* replicas) { batchnorm_replicas_ = replicas; }
  // The dtype F and R compute in (fp32 by default). The first forward under bf16 or fp16 warns
  // once (spdlog) naming the layers that return fp32 from inputs that were not.
  void set_precision(Precision precision) { precision_ = precision; }
  Precision precision() const { return precision_; }
  // The factor B multiplies the loss by (last stage; loss_scaler.h). The loss sum stays unscaled.
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // Modules of this stage that keep per-step state (deferred BatchNorm).
  const std::vector<StepObserver*>& step_observers() const { return observers_; }

 private:
  struct Pending {
    Activations input;
    Activations output;
    torch::Tensor loss;
    torch::Tensor target;
    double weight = 1.0;
    const LossFn* loss_fn = nullptr;
    WeightGradients weight_grads;  // what a split B left for W
    bool split = false;
    bool checkpointed = false;
    bool active = false;
  };

  // Runs every layer, each inside its LayerContext.
  Activations run_layers(int64_t m, Activations x, bool recompute);
  // Layer i by label and number, with the ops that made its fp32 outputs.
  std::string describe_fp32_layer(size_t i, const Activations& outputs) const;
  // The layers plus, on the last stage, the weighted loss.
  void run_forward(Pending& p, int64_t m, bool recompute);
  Pending& pending(int64_t m);
  // run_layers under the stage's precision: under autocast, its inputs taken as fp32 and its
  // outputs leaving in the compute dtype (fp32 from the last stage); run_layers alone for fp32.
  Activations run_in_precision(int64_t m, const Activations& input, bool recompute);

  int64_t index_;
  int64_t num_stages_;
  LayerList layers_;
  int64_t first_layer_;
  DeviceSpec device_;
  torch::Device torch_device_;
  std::vector<StepObserver*> observers_;
  StepCollectives* batchnorm_replicas_ = nullptr;
  Precision precision_ = Precision::kFp32;
  bool precision_checked_ = false;  // the once-per-stage report of layers that fall back to fp32
  double loss_scale_ = 1.0;

  int64_t step_ = 0;
  uint64_t seed_ = 0;
  std::vector<Pending> pending_;
  torch::Tensor loss_sum_;
};

}  // namespace gpipe
