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
  offsets_ = stage_offsets(options_.balance(), static_cast<int64_t>(layers_.size()));
  transport_ = std::make_unique<LocalTransport>();
  build(0, num_stages());
}

Pipeline::Pipeline(LayerList layers, PipelineOptions options, int64_t local_stage,
                   std::unique_ptr<Transport> transport, StepCollectives* collectives, LossFn loss)
    : layers_(std::move(layers)),
      options_(std::move(options)),
      loss_(std::move(loss)),
      first_local_stage_(local_stage),
      transport_(std::move(transport)),
      collectives_(collectives) {
  const auto& balance = options_.balance();
  GPIPE_CHECK(local_stage >= 0 && local_stage < static_cast<int64_t>(balance.size()), ConfigError,
              "local stage ", local_stage, " is outside balance ", c10::Join(",", balance));
  int64_t total = 0;
  for (int64_t b : balance)
    total += b;
  offsets_ = stage_offsets(balance, total);
  GPIPE_CHECK(static_cast<int64_t>(layers_.size()) == balance[local_stage], ConfigError, "stage ",
              local_stage, " of balance ", c10::Join(",", balance), " has ", balance[local_stage],
              " layers but ", layers_.size(), " were given");
  GPIPE_CHECK(transport_ != nullptr, ConfigError, "a distributed pipeline needs a transport");
  build(local_stage, 1);
}

void Pipeline::build(int64_t first_stage, int64_t count) {
  const int64_t K = num_stages();
  std::vector<DeviceSpec> all;
  if (options_.devices().empty()) {
    all = default_cpu_devices(K);
  } else {
    for (const auto& d : options_.devices())
      all.push_back(DeviceSpec::parse(d));
  }
  const bool one_device_for_local_stage = count == 1 && K > 1 && all.size() == 1;
  GPIPE_CHECK(static_cast<int64_t>(all.size()) == K || one_device_for_local_stage, ConfigError,
              "balance ", c10::Join(",", options_.balance()), " has K=", K, " stages but ",
              all.size(), " devices were given (", c10::Join(",", options_.devices()),
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
                      : count > 1                       ? 1
                                                        : hardware_threads();
  std::vector<std::string> names;
  int64_t local_offset = 0;
  for (int64_t s = first_stage; s < first_stage + count; ++s) {
    const DeviceSpec device = one_device_for_local_stage ? all[0] : all[s];
    devices_.push_back(device);
    workers_.push_back(std::make_unique<DeviceWorker>(device, threads));
    const int64_t size = options_.balance()[s];
    LayerList part(layers_.begin() + local_offset, layers_.begin() + local_offset + size);
    local_offset += size;
    stages_.push_back(std::make_unique<Stage>(s, K, std::move(part), offsets_[s], device));
    names.push_back(c10::str("stage ", s, " (", device.str(), ")"));
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
  bool aborted = false;
  std::vector<std::future<void>> futures;
  for (int64_t i = 0; i < num_local_stages(); ++i) {
    futures.push_back(workers_[i]->submit([&, i] {
      try {
        fn(*stages_[i]);
      } catch (const AbortedError&) {
        // Another stage failed first; its error is the one to report.
        std::lock_guard<std::mutex> lock(mutex);
        aborted = true;
      } catch (...) {
        const auto error = std::current_exception();
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (failed < 0) {
            failed = i;
            first = error;
          }
        }
        transport_->abort(c10::str("stage ", stages_[i]->index(), " (", devices_[i].str(),
                                   ") failed: ", describe_exception(error)));
      }
    }));
  }
  for (auto& f : futures)
    f.get();
  if (failed >= 0) {
    const int64_t stage = stages_[failed]->index();
    throw StageError(c10::str("stage ", stage, " (", devices_[failed].str(), ") failed in step ",
                              step_, ": ", describe_exception(first)),
                     static_cast<int>(stage));
  }
  if (aborted) {
    // Every local stage was stopped by a failure elsewhere: another process's stage.
    const std::string why = collectives_ != nullptr ? collectives_->abort_reason() : "";
    throw StageError(
        c10::str("step ", step_, " aborted: ", why.empty() ? "another stage failed" : why), -1);
  }
}

void Pipeline::set_optimizer(const OptimizerFactory& factory) {
  GPIPE_CHECK(static_cast<bool>(factory), ConfigError, "set_optimizer needs a factory");
  optimizers_.clear();
  optimizers_.resize(stages_.size());
  for_each_stage([&](Stage& stage) {
    optimizers_[stage.index() - first_local_stage_] = factory(stage.parameters());
  });
}

torch::optim::Optimizer& Pipeline::optimizer(int64_t stage) {
  GPIPE_CHECK(!optimizers_.empty(), ConfigError, "no optimizer: call set_optimizer first");
  return *optimizers_.at(stage - first_local_stage_);
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

std::vector<torch::Tensor> Pipeline::parameters() const {
  std::vector<torch::Tensor> params;
  for (const auto& stage : stages_) {
    for (auto& p : stage->parameters())
      params.push_back(p);
  }
  return params;
}

std::vector<std::pair<std::string, torch::Tensor>> Pipeline::named_tensors(bool buffers) const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const int64_t first = offsets_[first_local_stage_];
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto prefix = std::to_string(first + static_cast<int64_t>(i)) + ".";
    const auto items = buffers ? layers_[i]->named_buffers() : layers_[i]->named_parameters();
    for (const auto& item : items)
      out.emplace_back(prefix + item.key(), item.value());
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
  transport_->reset();
  timeline_.clear();
  const auto start = Timeline::Clock::now();
  begin_memory_window();
  try {
    for_each_stage([&](Stage& stage) {
      run_stage_actions(stage, schedule.actions[stage.index()], schedule.microbatches, data,
                        *transport_, &timeline_, outputs);
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
    e.stage -= first_local_stage_;  // over the stages this process runs
  last_step_.bubble_fraction = bubble_fraction(events, num_local_stages());
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
  // Weights are shares of the whole mini-batch over every replica, so that summing gradients
  // over replicas gives the mini-batch mean.
  const int64_t global_n = collectives_ != nullptr ? collectives_->global_batch(n) : n;

  StepData data;
  data.step = step_;
  data.seed = options_.seed();
  data.training = true;
  data.checkpoint = options_.checkpoint();
  data.loss = &loss_;
  data.inputs = split_microbatches(input, M);
  data.targets = split_microbatches(target, M);
  for (int64_t size : sizes)
    data.weights.push_back(static_cast<double>(size) / global_n);

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
  double loss = holds_last_stage() ? stages_.back()->loss_sum() : 0.0;
  bool finite = std::isfinite(loss);
  if (collectives_ != nullptr) std::tie(loss, finite) = collectives_->reduce_loss(loss, finite);
  last_step_.loss = loss;
  if (!finite || !std::isfinite(loss)) {
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
  if (collectives_ != nullptr) {
    std::vector<torch::Tensor> grads;
    for (const auto& stage : stages_) {
      for (const auto& p : stage->parameters()) {
        if (p.grad().defined()) grads.push_back(p.grad());
      }
    }
    collectives_->reduce_gradients(grads);
  }
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
  for_each_stage([&](Stage& stage) { optimizers_[stage.index() - first_local_stage_]->step(); });
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
  try {
    run_step(make_forward_schedule(num_stages(), M), data, holds_last_stage() ? &outputs : nullptr);
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
