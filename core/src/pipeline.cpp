#include "gpipe/pipeline.h"

#include <cmath>
#include <future>
#include <mutex>

#include "gpipe/errors.h"
#include "gpipe/memory.h"
#include "gpipe/microbatch.h"

namespace gpipe {

std::vector<int64_t> stage_offsets(const std::vector<int64_t>& balance, int64_t num_layers) {
  GPIPE_CHECK(!balance.empty(), ConfigError,
              "balance is empty: give the number of layers of each "
              "stage, e.g. {",
              num_layers, "} for one stage");
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (size_t s = 0; s < balance.size(); ++s) {
    GPIPE_CHECK(balance[s] >= 1, ConfigError, "balance ", c10::Join(",", balance), " gives stage ",
                s, " ", balance[s], " layers; every stage needs at least one");
    offsets.push_back(total);
    total += balance[s];
  }
  GPIPE_CHECK(total == num_layers, ConfigError, "balance ", c10::Join(",", balance), " sums to ",
              total, " but the model has ", num_layers,
              " layers; the balance must cover every layer exactly once");
  return offsets;
}

std::string describe_exception(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

Pipeline::Pipeline(LayerList layers, PipelineOptions options, LossFn loss)
    : layers_(std::move(layers)), options_(std::move(options)), loss_(std::move(loss)) {
  const auto offsets = stage_offsets(options_.balance(), static_cast<int64_t>(layers_.size()));
  const auto K = static_cast<int64_t>(options_.balance().size());
  if (options_.devices().empty()) {
    devices_ = default_cpu_devices(K);
  } else {
    for (const auto& d : options_.devices())
      devices_.push_back(DeviceSpec::parse(d));
  }
  GPIPE_CHECK(static_cast<int64_t>(devices_.size()) == K, ConfigError, "balance ",
              c10::Join(",", options_.balance()), " has K=", K, " stages but ", devices_.size(),
              " devices were given (", c10::Join(",", options_.devices()),
              "); give exactly one device per stage");
  GPIPE_CHECK(options_.chunks() >= 1, ConfigError,
              "chunks (M, micro-batches per mini-batch) must be >= 1, got ", options_.chunks());
  GPIPE_CHECK(options_.threads_per_device() >= 0, ConfigError,
              "threads_per_device must be >= 0 (0 = automatic), got ",
              options_.threads_per_device());
  GPIPE_CHECK(static_cast<bool>(loss_), ConfigError, "the pipeline needs a loss function");
  for (const auto& layer : layers_) {
    GPIPE_CHECK(layer != nullptr, ConfigError, "the layer list contains a null layer");
  }
  train_schedule_ = make_schedule(options_.schedule(), K, options_.chunks());

  memory::install();
  const int threads = options_.threads_per_device() > 0 ? options_.threads_per_device()
                      : K > 1                           ? 1
                                                        : hardware_threads();
  std::vector<std::string> names;
  for (int64_t s = 0; s < K; ++s) {
    workers_.push_back(std::make_unique<DeviceWorker>(devices_[s], threads));
    LayerList part(layers_.begin() + offsets[s],
                   layers_.begin() + offsets[s] + options_.balance()[s]);
    stages_.push_back(std::make_unique<Stage>(s, K, std::move(part), offsets[s], devices_[s]));
    names.push_back(c10::str("stage ", s, " (", devices_[s].str(), ")"));
  }
  timeline_.set_stage_names(names);
  // Place every parameter and buffer on its stage's device: CUDA moves them; a virtual CPU device
  // takes over their accounting (or a copy made on its thread, if the meter never saw them).
  for_each_stage([](Stage& stage) {
    for (const auto& layer : stage.layers()) {
      if (stage.device().is_cuda()) {
        layer->to(stage.device().torch_device());
        continue;
      }
      torch::NoGradGuard no_grad;
      auto place = [&](torch::Tensor& t) {
        if (t.defined() && !memory::charge(t, stage.device())) t.set_data(t.data().clone());
      };
      for (auto& p : layer->parameters())
        place(p);
      for (auto& b : layer->buffers())
        place(b);
    }
  });
}

Pipeline::~Pipeline() {
  optimizers_.clear();
  stages_.clear();
  workers_.clear();  // joins the threads
}

void Pipeline::for_each_stage(const std::function<void(Stage&)>& fn) {
  std::mutex mutex;
  int64_t failed = -1;
  std::exception_ptr first;
  std::vector<std::future<void>> futures;
  for (int64_t s = 0; s < num_stages(); ++s) {
    futures.push_back(workers_[s]->submit([&, s] {
      try {
        fn(*stages_[s]);
      } catch (const AbortedError&) {
        // another stage failed first; its error is the one to report
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (failed < 0) {
            failed = s;
            first = std::current_exception();
          }
        }
        transport_.abort(c10::str("stage ", s, " failed"));
      }
    }));
  }
  for (auto& f : futures)
    f.get();
  if (failed >= 0) {
    throw StageError(c10::str("stage ", failed, " (", devices_[failed].str(), ") failed in step ",
                              step_, ": ", describe_exception(first)),
                     static_cast<int>(failed));
  }
}

void Pipeline::set_optimizer(const OptimizerFactory& factory) {
  GPIPE_CHECK(static_cast<bool>(factory), ConfigError, "set_optimizer needs a factory");
  optimizers_.clear();
  optimizers_.resize(stages_.size());
  for_each_stage([&](Stage& stage) { optimizers_[stage.index()] = factory(stage.parameters()); });
}

torch::optim::Optimizer& Pipeline::optimizer(int64_t stage) {
  GPIPE_CHECK(!optimizers_.empty(), ConfigError, "no optimizer: call set_optimizer first");
  return *optimizers_.at(stage);
}

void Pipeline::set_learning_rate(double lr) {
  for (auto& opt : optimizers_) {
    for (auto& group : opt->param_groups())
      group.options().set_lr(lr);
  }
}

void Pipeline::set_grad_clip(double max_norm) {
  GPIPE_CHECK(max_norm >= 0 && std::isfinite(max_norm), ConfigError,
              "gradient clipping norm must be finite and >= 0 (0 = off), got ", max_norm);
  grad_clip_ = max_norm;
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

void Pipeline::train(bool on) {
  for (auto& layer : layers_)
    layer->train(on);
}

double Pipeline::grad_norm() {
  std::vector<double> squares(stages_.size(), 0.0);
  for_each_stage([&](Stage& stage) {
    double sum = 0;
    for (const auto& p : stage.parameters()) {
      if (p.grad().defined()) sum += p.grad().to(torch::kDouble).square().sum().item<double>();
    }
    squares[stage.index()] = sum;
  });
  double total = 0;
  for (double s : squares)
    total += s;
  return std::sqrt(total);
}

std::vector<torch::Tensor> Pipeline::parameters() const {
  std::vector<torch::Tensor> params;
  for (const auto& stage : stages_) {
    for (auto& p : stage->parameters())
      params.push_back(p);
  }
  return params;
}

std::vector<std::pair<std::string, torch::Tensor>> Pipeline::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const auto& item : layers_[i]->named_parameters()) {
      out.emplace_back(std::to_string(i) + "." + item.key(), item.value());
    }
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Pipeline::named_buffers() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const auto& item : layers_[i]->named_buffers()) {
      out.emplace_back(std::to_string(i) + "." + item.key(), item.value());
    }
  }
  return out;
}

void Pipeline::begin_memory_window() {
  window_start_bytes_.clear();
  for (const auto& device : devices_) {
    window_start_bytes_.push_back(memory::stats(device).current_bytes);
    memory::reset_peak(device);
  }
}

void Pipeline::end_memory_window() {
  last_step_.peak_bytes.clear();
  last_step_.peak_activation_bytes.clear();
  for (size_t s = 0; s < devices_.size(); ++s) {
    const auto stats = memory::stats(devices_[s]);
    last_step_.peak_bytes.push_back(stats.peak_bytes);
    last_step_.peak_activation_bytes.push_back(
        std::max<int64_t>(0, stats.peak_bytes - window_start_bytes_[s]));
  }
}

void Pipeline::run_step(const Schedule& schedule, StepData& data,
                        std::vector<Activations>* outputs) {
  transport_.reset();
  timeline_.clear();
  const auto start = Timeline::Clock::now();
  begin_memory_window();
  try {
    for_each_stage([&](Stage& stage) {
      run_stage_actions(stage, schedule.actions[stage.index()], schedule.microbatches, data,
                        transport_, &timeline_, outputs);
    });
  } catch (...) {
    for (auto& stage : stages_)
      stage->clear();
    end_memory_window();
    throw;
  }
  end_memory_window();
  last_step_.seconds = std::chrono::duration<double>(Timeline::Clock::now() - start).count();
  last_step_.bubble_fraction = bubble_fraction(timeline_.events(), num_stages());
}

double Pipeline::forward_backward(const Activations& input, const torch::Tensor& target) {
  const int64_t n = batch_size(input);
  GPIPE_CHECK(target.defined() && target.dim() > 0, InputError,
              "the target must be a tensor with a batch dimension");
  GPIPE_CHECK(target.size(0) == n, InputError, "input batch size ", n,
              " differs from target batch size ", target.size(0),
              "; every sample needs exactly one target");
  const int64_t M = options_.chunks();
  const auto sizes = microbatch_sizes(n, M);

  StepData data;
  data.step = step_;
  data.seed = options_.seed();
  data.training = true;
  data.checkpoint = options_.checkpoint();
  data.loss = &loss_;
  data.inputs = split_microbatches(input, M);
  data.targets = split_microbatches(target, M);
  for (int64_t size : sizes)
    data.weights.push_back(static_cast<double>(size) / n);

  zero_grad();
  auto abort_observers = [&] {
    for_each_stage([](Stage& stage) {
      for (auto* observer : stage.step_observers())
        observer->on_step_abort();
    });
  };
  try {
    run_step(train_schedule_, data, nullptr);
  } catch (...) {
    abort_observers();
    zero_grad();
    throw;
  }
  const double loss = stages_.back()->loss_sum();
  last_step_.loss = loss;
  if (!std::isfinite(loss)) {
    abort_observers();
    zero_grad();
    throw NonFiniteLossError(
        c10::str("the loss of step ", step_, " is ", loss,
                 "; the step was refused and the parameters are unchanged (lower the learning "
                 "rate, or enable gradient clipping)"),
        loss);
  }
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
  const double loss = forward_backward(input, target);
  if (grad_clip_ > 0) {
    const double norm = grad_norm();
    if (norm > grad_clip_) {
      const double scale = grad_clip_ / (norm + 1e-6);
      for_each_stage([&](Stage& stage) {
        for (auto& p : stage.parameters()) {
          if (p.grad().defined()) p.mutable_grad().mul_(scale);
        }
      });
    }
  }
  for_each_stage([&](Stage& stage) { optimizers_[stage.index()]->step(); });
  ++step_;
  return loss;
}

torch::Tensor Pipeline::forward(const torch::Tensor& input) {
  return forward(Activations{input}).at(0);
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
  try {
    run_step(make_forward_schedule(num_stages(), M), data, &outputs);
  } catch (...) {
    for (size_t i = 0; i < layers_.size(); ++i)
      layers_[i]->train(modes[i]);
    throw;
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->train(modes[i]);
  return merge_microbatches(outputs);
}

}  // namespace gpipe
