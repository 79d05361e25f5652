// Layer: the unit a pipeline is cut into, and the context the executor runs it in.
//
// Why this file exists: the engine sees a model as a flat list of layers, each mapping
// Activations to Activations, so that `balance` can put any contiguous run of layers on a stage.
// While a layer runs inside a pipeline, the executor publishes a LayerContext on the running
// thread: which step, micro-batch and layer this is, and whether this is a recompute. Random
// layers draw from the context's generator (so results do not depend on K, thread timing or
// recompute), and deferred BatchNorm uses it to keep recomputes out of its statistics.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpipe/activations.h"

namespace gpipe {

class StepCollectives;  // step_collectives.h

// A layer of a pipeline: a module with a forward over Activations.
class Layer : public torch::nn::Module {
 public:
  explicit Layer(std::string name = "layer") : torch::nn::Module(name), label_(std::move(name)) {}
  virtual Activations forward(const Activations& inputs) = 0;

  // A short human-readable name ("stem", "cell_3", "linear_0") for traces and model_info.
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }

 private:
  std::string label_;
};

using LayerPtr = std::shared_ptr<Layer>;
using LayerList = std::vector<LayerPtr>;

// A module that maps one tensor to one tensor (Linear, Conv2d, ReLU, Sequential, ...), as a
// layer. The wrapped module is registered as submodule "module".
class ModuleLayer : public Layer {
 public:
  ModuleLayer(std::string name, torch::nn::AnyModule module);
  Activations forward(const Activations& inputs) override;

 private:
  torch::nn::AnyModule module_;
};

// A stateless function of Activations (reshape, split, pass-through) as a layer.
class FunctionLayer : public Layer {
 public:
  using Function = std::function<Activations(const Activations&)>;
  FunctionLayer(std::string name, Function fn);
  Activations forward(const Activations& inputs) override { return fn_(inputs); }

 private:
  Function fn_;
};

// make_layer("fc1", torch::nn::Linear(4, 8)): wraps any single-tensor module holder.
template <typename ModuleHolder>
LayerPtr make_layer(std::string name, ModuleHolder module) {
  return std::make_shared<ModuleLayer>(std::move(name), torch::nn::AnyModule(std::move(module)));
}
LayerPtr make_function_layer(std::string name, FunctionLayer::Function fn);

// Total parameter count of a list of layers.
int64_t count_parameters(const LayerList& layers);

// Implemented by modules that keep per-step state across micro-batches (deferred BatchNorm).
// The pipeline calls on_step_end() once after every micro-batch of a training step has run its
// forward and backward, and on_step_abort() when the step fails or is refused.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step_end() = 0;
  virtual void on_step_abort() = 0;
};

// What the executor tells a layer about the call in progress.
struct LayerContext {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t microbatch = 0;
  int64_t layer = 0;  // global index of the layer in the whole pipeline
  bool recompute = false;
  // Sums BatchNorm statistics over the stage's replicas (synchronised BatchNorm), or null.
  StepCollectives* replicas = nullptr;

  // The generator for this (seed, step, micro-batch, layer) on `device`'s type, created on first
  // use. Every random draw of the layer in this call takes from it in program order, so a
  // recompute draws the same numbers as the forward it replays.
  at::Generator& generator(const torch::Device& device = torch::kCPU);

 private:
  c10::optional<at::Generator> cpu_generator_;
  c10::optional<at::Generator> cuda_generator_;
};

// The context of the innermost LayerContextGuard on this thread, or nullptr outside a pipeline
// (a plain model call: layers then behave like their LibTorch counterparts).
LayerContext* current_layer_context();

// Installs `context` on this thread for its lifetime (restoring the previous one after).
class LayerContextGuard {
 public:
  explicit LayerContextGuard(LayerContext* context);
  ~LayerContextGuard();
  LayerContextGuard(const LayerContextGuard&) = delete;
  LayerContextGuard& operator=(const LayerContextGuard&) = delete;

 private:
  LayerContext* previous_;
};

// splitmix64-style mixing of the four keys into one 64-bit seed; exposed for tests.
uint64_t mix_seed(uint64_t seed, int64_t step, int64_t microbatch, int64_t layer);

}  // namespace gpipe
