#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/profile.h"

namespace gpipe::train {
nlohmann::json TrainResult::to_json() const {
  return {{"losses", losses},
          {"step_seconds", step_seconds},
          {"throughput_samples_per_s", throughput_samples_per_s},
          {"bubble_fraction", bubble_fraction},
          {"peak_memory_bytes_per_device", peak_memory_bytes_per_device},
          {"peak_activation_bytes_per_device", peak_activation_bytes_per_device},
          {"balance", balance},
          {"parameters", parameters},
          {"param_checksum", param_checksum}};
}

Trainer::Trainer(TrainOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  GPIPE_CHECK(o.batch_size >= 1, ConfigError, "--batch-size must be >= 1, got ", o.batch_size);
  GPIPE_CHECK(o.steps >= 1, ConfigError, "--steps must be >= 1, got ", o.steps);
  GPIPE_CHECK(o.chunks >= 1 && o.chunks <= o.batch_size, ConfigError, "--chunks ", o.chunks,
              " must be between 1 and --batch-size ", o.batch_size);
  GPIPE_CHECK(o.comm_timeout > 0, ConfigError, "--comm-timeout must be > 0 s, got ",
              o.comm_timeout);
  options_.model.init_seed = o.seed;
  builder_ = models::make_model(options_.model);
  total_layers_ = builder_->num_layers();
  resolve_balance();

  PipelineOptions pipe_options(balance_);
  pipe_options.chunks(o.chunks)
      .checkpoint(parse_checkpoint(o.checkpoint))
      .schedule(parse_schedule_kind(o.schedule))
      .seed(o.seed)
      .threads_per_device(o.threads_per_device);
  if (!o.devices.empty()) pipe_options.devices(cli::parse_strings(o.devices));
  if (!o.distributed) {
    if (layers_.empty()) layers_ = builder_->build();
    pipeline_ = std::make_unique<Pipeline>(layers_, pipe_options, builder_->loss());
  } else {
    const auto env = distributed::Env::from_environment();
    const auto K = static_cast<int64_t>(balance_.size());
    context_ = std::make_unique<distributed::Context>(
        env, distributed::ContextOptions(K).timeout(std::chrono::milliseconds(
                 static_cast<int64_t>(o.comm_timeout * 1000))));
    // A peer's failure ends this process too, with the lost rank named.
    const int rank = env.rank;
    context_->set_abort_handler([rank](const std::string& why) {
      spdlog::error("rank {} stops: {}", rank, why);
      spdlog::default_logger()->flush();
      std::_Exit(cli::kExitFailure);
    });
    GPIPE_CHECK(o.batch_size % context_->replicas() == 0, ConfigError, "--batch-size ",
                o.batch_size, " does not split evenly over ", context_->replicas(), " replicas");
    GPIPE_CHECK(o.chunks <= o.batch_size / context_->replicas(), ConfigError, "--chunks ",
                o.chunks, " exceeds each replica's ", o.batch_size / context_->replicas(),
                " samples");
    if (o.threads_per_device == 0) {
      const char* local = std::getenv("LOCAL_WORLD_SIZE");
      const int processes = local != nullptr ? std::max(1, std::atoi(local)) : 1;
      pipe_options.threads_per_device(std::max(1, hardware_threads() / processes));
    }
    // Build only this stage's layers: the others live in other processes.
    const int64_t stage = context_->stage();
    const auto offsets = stage_offsets(balance_, total_layers_);
    layers_ = builder_->build_range(offsets[stage], offsets[stage] + balance_[stage]);
    pipeline_ = std::make_unique<Pipeline>(
        layers_, pipe_options, stage, std::make_unique<distributed::ProcessGroupTransport>(*context_),
        context_.get(), builder_->loss());
  }
  const double lr = o.lr, momentum = o.momentum;
  pipeline_->set_optimizer([lr, momentum](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params,
                                               torch::optim::SGDOptions(lr).momentum(momentum));
  });
}

void Trainer::resolve_balance() {
  const auto& o = options_;
  if (!o.balance.empty()) {
    balance_ = cli::parse_ints(o.balance, "--balance");
    GPIPE_CHECK(o.partitions == 0 || o.partitions == static_cast<int64_t>(balance_.size()),
                ConfigError, "--balance ", o.balance, " has ", balance_.size(),
                " stages but --partitions is ", o.partitions);
    return;
  }
  const int64_t K = o.partitions > 0 ? o.partitions : 1;
  GPIPE_CHECK(K <= total_layers_, ConfigError, "--partitions ", K,
              " is larger than the model's ", total_layers_, " layers");
  const auto by = parse_balance_by(o.balance_by);
  // Profiled costs differ from process to process; every rank must agree on the balance.
  GPIPE_CHECK(!o.distributed || by == BalanceBy::kParams, ConfigError,
              "--distributed needs --balance a,b,.. or --balance-by params (got --balance-by ",
              o.balance_by, ", whose profile would differ between processes)");
  if (K == 1) {
    balance_ = {total_layers_};
  } else if (by == BalanceBy::kParams) {
    // Counted layer by layer: no need to hold the model.
    std::vector<double> costs;
    for (int64_t count : builder_->layer_parameters()) costs.push_back(static_cast<double>(count));
    balance_ = balance_by_cost(costs, K);
  } else {
    layers_ = builder_->build();
    const auto sample = builder_->sample_batch((o.batch_size + o.chunks - 1) / o.chunks, o.seed);
    balance_ = auto_balance(layers_, K, by, {sample.input});
  }
}

models::SampleBatch Trainer::shard(models::SampleBatch batch) const {
  if (context_ == nullptr || context_->replicas() == 1) return batch;
  const int64_t rows = batch.input.size(0) / context_->replicas();
  const int64_t begin = context_->replica() * rows;
  return {batch.input.narrow(0, begin, rows), batch.target.narrow(0, begin, rows)};
}

models::SampleBatch Trainer::synthetic_batch(int64_t step) const {
  return builder_->sample_batch(options_.batch_size,
                                mix_seed(options_.seed, step, /*microbatch=*/-1, /*layer=*/-1));
}

TrainResult Trainer::run() {
  const auto& o = options_;
  TrainResult result;
  result.balance = balance_;
  result.parameters = count_parameters(layers_);
  if (context_ != nullptr) {
    result.parameters = static_cast<int64_t>(
        std::llround(context_->sum_over_stages(static_cast<double>(result.parameters))));
  }
  if (reports()) spdlog::info("model {} ({} layers, {} parameters), balance {}, M={}, checkpoint {}, schedule {}",
               o.model.name, total_layers_, result.parameters, c10::Join(",", balance_), o.chunks,
               o.checkpoint, o.schedule);
  double timed_seconds = 0;
  int64_t timed_samples = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto batch = shard(synthetic_batch(step));
    const auto start = std::chrono::steady_clock::now();
    const double loss = pipeline_->train_step(batch.input, batch.target);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.losses.push_back(loss);
    result.step_seconds.push_back(seconds);
    if (step > 0 || o.steps == 1) {  // the first step allocates gradients and optimizer state
      timed_seconds += seconds;
      timed_samples += o.batch_size;
    }
    if (reports() && ((step + 1) % std::max<int64_t>(o.log_every, 1) == 0 || step + 1 == o.steps)) {
      spdlog::info("step {}/{}  loss {:.4f}  {:.1f} samples/s  bubble {:.3f}", step + 1, o.steps,
                   loss, o.batch_size / seconds, pipeline_->last_step().bubble_fraction);
    }
  }
  const auto& last = pipeline_->last_step();
  result.throughput_samples_per_s = timed_samples / std::max(timed_seconds, 1e-12);
  result.bubble_fraction = last.bubble_fraction;
  result.peak_memory_bytes_per_device = last.peak_bytes;
  result.peak_activation_bytes_per_device = last.peak_activation_bytes;
  result.param_checksum = pipeline_->param_checksum();
  if (context_ != nullptr) {
    // Every process measured its own stage: gather the per-stage peaks of replica 0.
    const int64_t K = context_->stages();
    auto peaks = torch::zeros({2, K}, torch::kDouble);
    if (context_->replica() == 0) {
      peaks[0][context_->stage()] = static_cast<double>(last.peak_bytes.at(0));
      peaks[1][context_->stage()] = static_cast<double>(last.peak_activation_bytes.at(0));
    }
    peaks = peaks.reshape({-1});
    std::vector<at::Tensor> tensors{peaks};
    context_->world_group().allreduce(tensors)->wait(context_->timeout());
    result.peak_memory_bytes_per_device.clear();
    result.peak_activation_bytes_per_device.clear();
    for (int64_t s = 0; s < K; ++s) {
      result.peak_memory_bytes_per_device.push_back(static_cast<int64_t>(peaks[s].item<double>()));
      result.peak_activation_bytes_per_device.push_back(
          static_cast<int64_t>(peaks[K + s].item<double>()));
    }
  }
  if (!o.trace.empty() && reports()) pipeline_->timeline().write_chrome_trace(o.trace);
  return result;
}

}  // namespace gpipe::train
