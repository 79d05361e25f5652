#include "gpipe/pipeline.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <mutex>

#include "gpipe/errors.h"
#include "gpipe/fault_injection.h"
#include "gpipe/lowering.h"
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

std::vector<int64_t> PipelineLayout::stages_of(int64_t device) const {
  std::vector<int64_t> stages;
  for (int64_t s = 0; s < num_stages(); ++s) {
    if (stage_device[s] == device) stages.push_back(s);
  }
  return stages;
}

std::vector<int64_t> PipelineLayout::layers_of(int64_t device) const {
  std::vector<int64_t> layers;
  for (int64_t s : stages_of(device)) {
    for (int64_t i = 0; i < stage_balance[s]; ++i)
      layers.push_back(stage_offset[s] + i);
  }
  return layers;
}

PipelineLayout make_layout(const PipelineOptions& options, int64_t num_layers) {
  const auto& balance = options.balance();
  stage_offsets(balance, num_layers);  // checks the balance
  PipelineLayout layout;
  layout.devices = static_cast<int64_t>(balance.size());
  const auto kind = options.schedule();
  const auto& program = options.program();
  GPIPE_CHECK((kind == ScheduleKind::kCustom) == (program != nullptr), ConfigError,
              "a custom schedule and its program come together: schedule ", to_string(kind),
              program ? " with" : " without", " a program");
  layout.virtual_stages = program                        ? program->virtual_stages
                          : options.virtual_stages() > 0 ? options.virtual_stages()
                                                         : default_virtual_stages(kind);
  const int64_t K = layout.devices, v = layout.virtual_stages;
  GPIPE_CHECK(!program || (program->devices == K &&
                           (options.virtual_stages() == 0 || options.virtual_stages() == v)),
              ConfigError, "the schedule file runs K=", program ? program->devices : 0,
              " devices with v=", v, " stages each, but the balance ", c10::Join(",", balance),
              " has ", K, " devices and v is ", options.virtual_stages());
  check_virtual_stages(kind, v);
  const auto stage_device = program ? program->stage_device : placement(kind, K, v);
  const auto& explicit_stages = options.stage_balance();
  GPIPE_CHECK(explicit_stages.empty() || static_cast<int64_t>(explicit_stages.size()) == K * v,
              ConfigError, "stage balance ", c10::Join(",", explicit_stages), " has ",
              explicit_stages.size(), " entries but K=", K, " devices x v=", v, " need ", K * v);
  int64_t offset = 0;
  for (int64_t s = 0; s < K * v; ++s) {
    const int64_t d = stage_device[s];
    int64_t size = 0;
    if (explicit_stages.empty()) {
      GPIPE_CHECK(balance[d] % v == 0, ConfigError, "balance ", c10::Join(",", balance),
                  " gives device ", d, " ", balance[d], " layers, which v=", v,
                  " virtual stages cannot share evenly; give each device a multiple of ", v,
                  " layers (or a stage balance)");
      size = balance[d] / v;
    } else {
      size = explicit_stages[s];
      GPIPE_CHECK(size >= 1, ConfigError, "stage balance ", c10::Join(",", explicit_stages),
                  " gives virtual stage ", s, " no layer");
    }
    layout.stage_balance.push_back(size);
    layout.stage_offset.push_back(offset);
    layout.stage_device.push_back(d);
    offset += size;
  }
  const auto per_device = sum_per_device(stage_device, K, layout.stage_balance);
  GPIPE_CHECK(per_device == balance, ConfigError, "stage balance ", c10::Join(",", explicit_stages),
              " puts ", c10::Join(",", per_device), " layers on the devices but the balance is ",
              c10::Join(",", balance));
  return layout;
}

Pipeline::Pipeline(LayerList layers, PipelineOptions options, LossFn loss)
    : layers_(std::move(layers)), options_(std::move(options)), loss_(std::move(loss)) {
  layout_ = make_layout(options_, static_cast<int64_t>(layers_.size()));
  // Local layers in stage order (a permutation of the model's when v > 1).
  LayerList ordered;
  for (int64_t d = 0; d < layout_.devices; ++d) {
    for (int64_t i : layout_.layers_of(d))
      ordered.push_back(layers_[i]);
  }
  layers_ = std::move(ordered);
  transport_ = std::make_unique<LocalTransport>(options_.link());
  build(0, layout_.devices);
}

Pipeline::Pipeline(LayerList layers, PipelineOptions options, int64_t local_device,
                   std::unique_ptr<Transport> transport, StepCollectives* collectives, LossFn loss)
    : layers_(std::move(layers)),
      options_(std::move(options)),
      loss_(std::move(loss)),
      transport_(std::move(transport)),
      collectives_(collectives) {
  const auto& balance = options_.balance();
  GPIPE_CHECK(local_device >= 0 && local_device < static_cast<int64_t>(balance.size()), ConfigError,
              "local device ", local_device, " is outside balance ", c10::Join(",", balance));
  int64_t total = 0;
  for (int64_t b : balance)
    total += b;
  layout_ = make_layout(options_, total);
  GPIPE_CHECK(static_cast<int64_t>(layers_.size()) == balance[local_device], ConfigError, "device ",
              local_device, " of balance ", c10::Join(",", balance), " has ", balance[local_device],
              " layers but ", layers_.size(), " were given");
  GPIPE_CHECK(transport_ != nullptr, ConfigError, "a distributed pipeline needs a transport");
  build(local_device, 1);
  if (collectives_ != nullptr && collectives_->replicas() > 1) {
    GPIPE_CHECK(options_.bucket_mb() > 0, ConfigError, "the gradient bucket size ",
                "(PipelineOptions::bucket_mb) must be positive, got ", options_.bucket_mb());
    std::vector<Stage*> local;
    for (auto& stage : stages_)
      local.push_back(stage.get());
    if (options_.sync_batchnorm()) {
      for (auto& stage : stages_)
        stage->set_batchnorm_replicas(collectives_);
    }
    reducer_ = std::make_unique<GradientReducer>(
        local, static_cast<int64_t>(options_.bucket_mb() * (1 << 20)),
        [collectives = collectives_](torch::Tensor& flat) {
          collectives->sum_gradient_bucket(flat);
        });
  }
}

std::vector<DeviceSpec> Pipeline::resolve_devices(int64_t count) const {
  const int64_t K = layout_.devices;
  std::vector<DeviceSpec> all;
  if (options_.devices().empty()) {
    all = default_cpu_devices(K);
  } else {
    for (const auto& d : options_.devices())
      all.push_back(DeviceSpec::parse(d));
  }
  const bool one_device_given = count == 1 && K > 1 && all.size() == 1;
  GPIPE_CHECK(static_cast<int64_t>(all.size()) == K || one_device_given, ConfigError, "balance ",
              c10::Join(",", options_.balance()), " has K=", K, " devices but ", all.size(),
              " devices were given (", c10::Join(",", options_.devices()),
              "); give exactly one device per balance entry");
  for (size_t a = 0; a < all.size(); ++a) {
    for (size_t b = a + 1; b < all.size(); ++b) {
      GPIPE_CHECK(all[a].is_cuda() || !(all[a] == all[b]), ConfigError, "device ", all[a].str(),
                  " is listed at positions ", a, " and ", b,
                  " of the devices: a CPU virtual device serves one pipeline device (its memory "
                  "is counted apart); give distinct ones, e.g. cpu:0,cpu:1");
    }
  }
  if (one_device_given) all.assign(K, all[0]);
  return all;
}

void Pipeline::build(int64_t first_device, int64_t count) {
  const int64_t K = layout_.devices;
  first_device_ = first_device;
  const auto all = resolve_devices(count);
  GPIPE_CHECK(options_.chunks() >= 1, ConfigError,
              "chunks (M, micro-batches per mini-batch) must be >= 1, got ", options_.chunks());
  GPIPE_CHECK(options_.threads_per_device() >= 0, ConfigError,
              "threads_per_device must be >= 0 (0 = automatic), got ",
              options_.threads_per_device());
  GPIPE_CHECK(static_cast<bool>(loss_), ConfigError, "the pipeline needs a loss function");
  for (const auto& layer : layers_) {
    GPIPE_CHECK(layer != nullptr, ConfigError, "the layer list contains a null layer");
  }
  const auto& program = options_.program();
  GPIPE_CHECK(!program || program->microbatches == options_.chunks(), ConfigError,
              "the schedule file runs M=", program ? program->microbatches : 0,
              " micro-batches but chunks is ", options_.chunks());
  train_schedule_ = lower(
      program ? *program
              : make_schedule(options_.schedule(), K, options_.chunks(), layout_.virtual_stages),
      options_.checkpoint());

  for (int64_t d = first_device; d < first_device + count; ++d)
    check_precision_supported(options_.precision(), all[d]);
  scaler_ = LossScaler(options_.loss_scale(),
                       needs_loss_scaling(options_.precision()) || options_.loss_scale().enabled());
  if (options_.measure_memory()) memory::install();
  const int threads = options_.threads_per_device() > 0 ? options_.threads_per_device()
                      : count > 1                       ? 1
                                                        : hardware_threads();
  std::vector<std::string> names;
  stage_ptrs_.assign(layout_.num_stages(), nullptr);
  int64_t local_offset = 0;
  for (int64_t d = first_device; d < first_device + count; ++d) {
    const DeviceSpec& device = all[d];
    devices_.push_back(device);
    workers_.push_back(std::make_unique<DeviceWorker>(device, threads));
    names.push_back(c10::str("device ", d, " (", device.str(), ")"));
    device_stages_.emplace_back();
    for (int64_t s : layout_.stages_of(d)) {
      const int64_t size = layout_.stage_balance[s];
      LayerList part(layers_.begin() + local_offset, layers_.begin() + local_offset + size);
      local_offset += size;
      stages_.push_back(std::make_unique<Stage>(s, layout_.num_stages(), std::move(part),
                                                layout_.stage_offset[s], device));
      stages_.back()->set_precision(options_.precision());
      stage_ptrs_[s] = stages_.back().get();
      device_stages_.back().push_back(stages_.back().get());
    }
  }
  std::sort(stages_.begin(), stages_.end(),
            [](const auto& a, const auto& b) { return a->index() < b->index(); });
  for (const auto& stage : stages_)
    local_stage_ids_.push_back(stage->index());
  timeline_.set_device_names(names);
  place_parameters();
}

void Pipeline::place_parameters() {
  // CUDA moves them; with the meter, a virtual CPU device takes over their accounting (or a copy
  // made on its thread, if the meter never saw them); without it there is nothing to do on CPU.
  const bool metered = options_.measure_memory();
  for_each_stage([metered](Stage& stage) {
    for (const auto& layer : stage.layers()) {
      if (stage.device().is_cuda()) {
        layer->to(stage.device().torch_device());
        continue;
      }
      if (!metered) continue;
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

Stage& Pipeline::stage(int64_t s) {
  GPIPE_CHECK(s >= 0 && s < num_stages() && stage_ptrs_[s] != nullptr, ConfigError, "stage ", s,
              " is not run by this process (local stages: ", c10::Join(",", local_stage_ids_), ")");
  return *stage_ptrs_[s];
}

void Pipeline::for_each_stage(const std::function<void(Stage&)>& fn) {
  for_each_device([&](size_t i) {
    for (Stage* stage : device_stages_[i])
      fn(*stage);
  });
}

void Pipeline::for_each_device(const std::function<void(size_t)>& fn) {
  std::mutex mutex;
  int64_t failed = -1;
  std::exception_ptr first;
  bool aborted = false;
  std::vector<std::future<void>> futures;
  for (size_t i = 0; i < workers_.size(); ++i) {
    futures.push_back(workers_[i]->submit([&, i] {
      try {
        fn(i);
      } catch (const AbortedError&) {
        // Another device failed first; its error is the one to report.
        std::lock_guard<std::mutex> lock(mutex);
        aborted = true;
      } catch (...) {
        const auto error = std::current_exception();
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (failed < 0) {
            failed = static_cast<int64_t>(i);
            first = error;
          }
        }
        transport_->abort(c10::str("device ", first_device_ + static_cast<int64_t>(i), " (",
                                   devices_[i].str(), ") failed: ", describe_exception(error)));
      }
    }));
  }
  for (auto& f : futures)
    f.get();
  if (failed >= 0) {
    const int64_t device = first_device_ + failed;
    throw DeviceError(c10::str("device ", device, " (", devices_[failed].str(), ") failed in step ",
                               step_, ": ", describe_exception(first)),
                      static_cast<int>(device));
  }
  if (aborted) {
    // Every local device was stopped by a failure elsewhere: another process's.
    const std::string why = collectives_ != nullptr ? collectives_->abort_reason() : "";
    throw DeviceError(
        c10::str("step ", step_, " aborted: ", why.empty() ? "another device failed" : why), -1);
  }
}

void Pipeline::set_optimizer(const OptimizerFactory& factory) {
  GPIPE_CHECK(static_cast<bool>(factory), ConfigError, "set_optimizer needs a factory");
  optimizers_.clear();
  optimizers_.resize(stages_.size());
  for_each_stage([&](Stage& stage) {
    const auto i = std::find(local_stage_ids_.begin(), local_stage_ids_.end(), stage.index()) -
                   local_stage_ids_.begin();
    optimizers_[i] = factory(stage.parameters());
  });
}

torch::optim::Optimizer& Pipeline::optimizer(int64_t stage) {
  GPIPE_CHECK(!optimizers_.empty(), ConfigError, "no optimizer: call set_optimizer first");
  const auto it = std::find(local_stage_ids_.begin(), local_stage_ids_.end(), stage);
  GPIPE_CHECK(it != local_stage_ids_.end(), ConfigError, "stage ", stage,
              " is not run by this process");
  return *optimizers_[it - local_stage_ids_.begin()];
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

void Pipeline::train(bool on) {
  for (auto& layer : layers_)
    layer->train(on);
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
  for (const auto& stage : stages_) {
    const auto& layers = stage->layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto prefix = std::to_string(stage->first_layer() + static_cast<int64_t>(i)) + ".";
      const auto items = buffers ? layers[i]->named_buffers() : layers[i]->named_parameters();
      for (const auto& item : items)
        out.emplace_back(prefix + item.key(), item.value());
    }
  }
  return out;
}

void Pipeline::begin_memory_window() {
  if (!options_.measure_memory()) return;
  memory_windows_.clear();  // closes the last step's windows first
  for (const auto& device : devices_)
    memory_windows_.emplace_back(device);
}

void Pipeline::end_memory_window() {
  last_step_.peak_bytes.clear();
  last_step_.peak_activation_bytes.clear();
  for (const auto& window : memory_windows_) {
    last_step_.peak_bytes.push_back(window.peak_bytes());
    last_step_.peak_activation_bytes.push_back(
        std::max<int64_t>(0, window.peak_bytes() - window.start_bytes()));
  }
}

int64_t Pipeline::peak_bytes_since_step_began(size_t i) const {
  GPIPE_CHECK(options_.measure_memory(), ConfigError,
              "peak bytes are measured only with PipelineOptions::measure_memory(true)");
  GPIPE_CHECK(i < memory_windows_.size(), ConfigError, "no step has run on local device ", i, " (",
              memory_windows_.size(), " measured)");
  return memory_windows_[i].peak_bytes();
}

// ---- the training step ---------------------------------------------------------------------
//
// A training step fans out to the device threads twice: once to zero the gradients and run the
// lowered schedule (and, without data parallelism, measure the gradients' norm), once to commit
// deferred BatchNorm statistics, scale the gradients by the clipping factor and step the
// optimizers. The loss stays a tensor until the schedule pass ends.

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
  std::atomic<int64_t> sent_bytes{0};
  data.sent_bytes = &sent_bytes;
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
    data.sent_bytes = nullptr;
    throw;
  }
  end_memory_window();
  data.sent_bytes = nullptr;
  last_step_.sent_bytes = sent_bytes.load();
  last_step_.seconds = std::chrono::duration<double>(Timeline::Clock::now() - start).count();
  auto events = timeline_.events();
  for (auto& e : events)
    e.device -= first_device_;  // over the devices this process runs
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

  if (holds_last_stage()) stage_ptrs_.back()->set_loss_scale(scaler_.scale());
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
  const bool scaling = scaler_.enabled();
  const double loss_scale = scaler_.scale();  // what run_training_schedule's backward uses
  const bool need_square = grad_clip_ > 0 || scaling;
  const double loss = run_training_schedule(input, target, need_square && !reduce, reduce);
  last_step_.grad_reduce = {};
  last_step_.loss_scale = loss_scale;
  last_step_.skipped = false;
  if (reducer_ != nullptr) {
    try {
      last_step_.grad_reduce = reducer_->finish();
    } catch (...) {
      abort_step();
      throw;
    }
  }
  // Of the gradients as the backward left them (times the loss scale): one sum over every stage
  // of every process, so its being non-finite is one verdict that every rank reaches.
  const double square = need_square ? gradient_square(reduce) : 0.0;
  if (scaling) {
    // GPIPE_FAULT_INJECT=overflow-step-N: step N's verdict is an overflow (fault_injection.h).
    const bool overflow =
        !std::isfinite(square) || fault_injected("overflow-step-" + std::to_string(step_));
    scaler_.update(overflow);
    if (overflow) {
      abort_step();
      last_step_.skipped = true;
      ++step_;
      return loss;
    }
  }
  double factor = 1.0 / loss_scale;
  if (grad_clip_ > 0) {
    const double norm = std::sqrt(square) / loss_scale;
    if (norm > grad_clip_) factor *= grad_clip_ / (norm + 1e-6);
  }
  apply_update(factor);
  ++step_;
  return loss;
}

double Pipeline::gradient_square(bool reduced) {
  double total = 0;
  if (reduced) {
    // The reduced gradients, summed over every stage of every process.
    for (size_t i = 0; i < workers_.size(); ++i)
      total += device_grad_square(i);
    return collectives_->sum_over_stages(total);
  }
  for (double s : squares_)
    total += s;
  return total;
}

void Pipeline::apply_update(double factor) {
  for_each_stage([&](Stage& stage) {
    for (auto* observer : stage.step_observers())
      observer->on_step_end();
    if (factor != 1.0) {
      for (auto& p : stage.parameters()) {
        if (p.grad().defined()) p.mutable_grad().mul_(factor);
      }
    }
    optimizer(stage.index()).step();
  });
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
  const auto schedule = lower(forward_schedule_like(train_schedule_, M), Checkpoint::kNever);
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
