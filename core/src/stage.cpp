#include "gpipe/stage.h"

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <set>

#include "gpipe/errors.h"

namespace gpipe {

Checkpoint parse_checkpoint(const std::string& name) {
  if (name == "always") return Checkpoint::kAlways;
  if (name == "except_last") return Checkpoint::kExceptLast;
  if (name == "never") return Checkpoint::kNever;
  throw ConfigError(
      c10::str("unknown checkpoint mode '", name, "': expected always, except_last or never"));
}

std::string to_string(Checkpoint mode) {
  switch (mode) {
    case Checkpoint::kAlways:
      return "always";
    case Checkpoint::kExceptLast:
      return "except_last";
    case Checkpoint::kNever:
      return "never";
  }
  return "?";
}

Stage::Stage(int64_t index, int64_t num_stages, LayerList layers, int64_t first_layer,
             DeviceSpec device)
    : index_(index),
      num_stages_(num_stages),
      layers_(std::move(layers)),
      first_layer_(first_layer),
      device_(device),
      torch_device_(device.torch_device()) {
  for (const auto& layer : layers_) {
    for (const auto& module : layer->modules(/*include_self=*/true)) {
      if (auto* observer = dynamic_cast<StepObserver*>(module.get()))
        observers_.push_back(observer);
    }
  }
}

std::vector<torch::Tensor> Stage::parameters() const {
  std::vector<torch::Tensor> params;
  for (const auto& layer : layers_) {
    for (auto& p : layer->parameters())
      params.push_back(p);
  }
  return params;
}

void Stage::begin_step(int64_t step, int64_t microbatches, uint64_t seed) {
  step_ = step;
  seed_ = seed;
  pending_.clear();
  pending_.resize(microbatches);
  loss_sum_ = torch::Tensor();
}

void Stage::clear() {
  pending_.clear();
  loss_sum_ = torch::Tensor();
}

Stage::Pending& Stage::pending(int64_t m) {
  GPIPE_CHECK(m >= 0 && m < static_cast<int64_t>(pending_.size()), ConfigError, "stage ", index_,
              ": micro-batch ", m, " outside this step's ", pending_.size());
  return pending_[m];
}

namespace {

bool has_fp32(const Activations& tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const torch::Tensor& t) {
    return t.defined() && t.scalar_type() == torch::kFloat;
  });
}

}  // namespace

// "<label> (layer <n>, ops A, B)": the layer and the ops that made its fp32 outputs.
std::string Stage::describe_fp32_layer(size_t i, const Activations& outputs) const {
  std::set<std::string> ops;
  for (const auto& t : outputs) {
    for (auto& op : fp32_source_ops(t))
      ops.insert(std::move(op));
  }
  const auto named = c10::Join(", ", std::vector<std::string>(ops.begin(), ops.end()));
  return c10::str(layers_[i]->label(), " (layer ", first_layer_ + static_cast<int64_t>(i),
                  ops.empty() ? "" : (ops.size() > 1 ? ", ops " : ", op ") + named, ")");
}

Activations Stage::run_layers(int64_t m, Activations x, bool recompute) {
  // Once per stage under a low precision, on the first run that records a graph: the layers
  // that turn inputs without an fp32 tensor (bf16, or tokens) into fp32 outputs, and the ops in
  // them that did it, said once. A layer fed fp32 that returns fp32 (a residual stream the plain
  // model keeps in fp32 too) is not a fallback and is not named.
  const bool check =
      precision_ != Precision::kFp32 && !precision_checked_ && torch::GradMode::is_enabled();
  std::vector<std::string> fp32_layers;
  for (size_t i = 0; i < layers_.size(); ++i) {
    LayerContext context;
    context.seed = seed_;
    context.step = step_;
    context.microbatch = m;
    context.layer = first_layer_ + static_cast<int64_t>(i);
    context.recompute = recompute;
    context.replicas = batchnorm_replicas_;
    LayerContextGuard guard(&context);
    const bool fed_fp32 = check && has_fp32(x);
    x = layers_[i]->forward(x);
    if (check && !fed_fp32 && has_fp32(x)) fp32_layers.push_back(describe_fp32_layer(i, x));
  }
  if (check) {
    precision_checked_ = true;
    if (!fp32_layers.empty()) {
      spdlog::warn(
          "stage {} under {} on {}: {} {} fp32 from inputs that were not: autocast keeps "
          "those ops in fp32 (no {} rule), so what follows runs in fp32 until an op casts it",
          index_, to_string(precision_), device_.str(), c10::Join(", ", fp32_layers),
          fp32_layers.size() == 1 ? "returns" : "return", to_string(precision_));
    }
  }
  return x;
}

Activations Stage::run_in_precision(int64_t m, const Activations& input, bool recompute) {
  if (precision_ == Precision::kFp32) return run_layers(m, input, recompute);
  Activations output;
  {
    AutocastGuard autocast(precision_, torch_device_.type());
    // What arrived rounded to the compute dtype enters the layers as fp32, inside the graph (its
    // gradient goes back in the compute dtype): within the stage, autocast decides each op's
    // dtype as in the plain model, and ops that take fp32 parameters with an fp32 input
    // (LibTorch 1.13's LayerNorm on a CPU) get one.
    output = run_layers(m, cast_floating(input, torch::kFloat), recompute);
  }
  // What leaves is in the compute dtype; the last stage's outputs feed the loss (and the caller,
  // in evaluation) in fp32.
  return cast_floating(output, is_last() ? torch::kFloat : compute_dtype(precision_));
}

void Stage::run_forward(Pending& p, int64_t m, bool recompute) {
  p.output = run_in_precision(m, p.input, recompute);
  if (is_last() && p.loss_fn != nullptr) {
    auto loss = (*p.loss_fn)(p.output, p.target);
    GPIPE_CHECK(loss.numel() == 1, ConfigError,
                "the loss function must return a scalar, got sizes ", loss.sizes());
    p.loss = loss.reshape({}) * p.weight;
  }
}

Activations Stage::forward(int64_t m, const Activations& input, bool checkpoint,
                           const torch::Tensor& target, double weight, const LossFn* loss) {
  auto& p = pending(m);
  GPIPE_CHECK(!p.active, ConfigError, "stage ", index_, " ran F", m, " twice in step ", step_);
  p.active = true;
  // Stage 0's inputs are data: nothing upstream needs their gradient.
  p.input = detach_for_stage(input, torch_device_, /*requires_grad=*/!is_first());
  p.checkpointed = checkpoint;
  p.weight = weight;
  p.loss_fn = loss;
  if (is_last() && loss != nullptr) p.target = target.to(torch_device_, /*non_blocking=*/true);
  if (checkpoint) {
    torch::NoGradGuard no_grad;
    run_forward(p, m, /*recompute=*/false);
  } else {
    run_forward(p, m, /*recompute=*/false);
  }
  if (p.loss.defined()) {
    const auto loss = p.loss.detach();
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + loss : loss.clone();
  }
  Activations out;
  for (const auto& t : p.output)
    out.push_back(t.defined() ? t.detach() : t);
  if (checkpoint) {
    p.output.clear();
    p.loss = torch::Tensor();
  }
  return out;
}

void Stage::recompute(int64_t m) {
  auto& p = pending(m);
  GPIPE_CHECK(p.active && p.checkpointed, ConfigError, "stage ", index_, ": R", m,
              " without a checkpointed F", m);
  torch::AutoGradMode grad_on(true);
  run_forward(p, m, /*recompute=*/true);
  p.checkpointed = false;
}

Activations Stage::backward(int64_t m, const Activations& grad_output, bool defer_weights) {
  auto& p = pending(m);
  GPIPE_CHECK(p.active && p.input.size() + p.output.size() > 0, ConfigError, "stage ", index_,
              " ran B", m, " before F", m, " or twice");
  // lower() places an R before the B of every checkpointed F; replaying here would hide a
  // schedule that forgot it (and run the recompute where no simulator or drawing shows it).
  GPIPE_CHECK(!p.checkpointed, InternalError, "stage ", index_, " ran B", m, " of a checkpointed F",
              m, " without its R: the lowered schedule lacks R", m);
  std::vector<torch::Tensor> roots, grads;
  if (is_last() && p.loss.defined()) {
    if (p.loss.requires_grad()) roots.push_back(loss_scale_ != 1.0 ? p.loss * loss_scale_ : p.loss);
  } else {
    GPIPE_CHECK(grad_output.size() == p.output.size(), ConfigError, "stage ", index_, " received ",
                grad_output.size(), " gradients for ", p.output.size(), " outputs of micro-batch ",
                m);
    for (size_t i = 0; i < p.output.size(); ++i) {
      const auto& out = p.output[i];
      if (!out.defined() || !out.requires_grad() || !grad_output[i].defined()) continue;
      roots.push_back(out);
      grads.push_back(grad_output[i].device() == torch_device_
                          ? grad_output[i]
                          : grad_output[i].to(torch_device_, /*non_blocking=*/true));
    }
  }
  Activations grad_input;
  if (defer_weights) {
    auto split = backward_input(roots, grads, p.input, parameters());
    grad_input = std::move(split.grads);
    // Only what W needs outlives B.
    p = Pending{};
    p.active = true;
    p.split = true;
    p.weight_grads = std::move(split.weights);
    return grad_input;
  }
  if (!roots.empty()) torch::autograd::backward(roots, grads);
  for (const auto& in : p.input) {
    grad_input.push_back(in.defined() && in.requires_grad() ? in.grad() : torch::Tensor());
  }
  p = Pending{};
  return grad_input;
}

void Stage::backward_weight(int64_t m) {
  auto& p = pending(m);
  GPIPE_CHECK(p.active && p.split, ConfigError, "stage ", index_, " ran W", m, " before a split B",
              m);
  p.weight_grads.run();
  p = Pending{};
}

Activations Stage::infer(int64_t m, const Activations& input) {
  torch::NoGradGuard no_grad;
  return run_in_precision(m, to_device(input, torch_device_), /*recompute=*/false);
}

}  // namespace gpipe
