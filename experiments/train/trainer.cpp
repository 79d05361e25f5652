#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <memory>
#include <thread>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/errors.h"
#include "gpipe/profile.h"
#include "train/optimization.h"
#include "train/progress.h"
#include "train/train_plan.h"

namespace gpipe::train {

void check_fits_host(const models::ModelBuilder& builder, const TrainOptions& o) {
  const auto& devices = o.shape.devices;
  const bool cpu = devices.empty() || devices.front().rfind("cpu", 0) == 0;
  if (!cpu) return;
  double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                  static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  std::string limit;
  rlimit address_space{};
  if (::getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY &&
      static_cast<double>(address_space.rlim_cur) < memory) {
    memory = static_cast<double>(address_space.rlim_cur);
    limit = " (its address-space limit, ulimit -v)";
  }
  if (memory <= 0) return;
  auto gib = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return std::string(text);
  };
  if (builder.counts_analytically()) {
    const int64_t parameters = builder.count_parameters();
    const double bytes = 8.0 * static_cast<double>(parameters);  // fp32 weights and gradients
    GPIPE_CHECK(bytes <= memory, ConfigError, "--model ", o.model.name(), " with ",
                builder.num_layers(), " layers has ", parameters, " parameters: ", gib(bytes),
                " for their weights and gradients alone, and this machine has ", gib(memory), limit,
                "; choose fewer or smaller layers");
  }
  // One mini-batch of inputs, at 4 bytes an element at least, in double: the product of the
  // bounded sizes may pass int64.
  const auto shape = builder.sample_shape();
  double bytes = 4.0 * static_cast<double>(o.batch_size);
  for (const int64_t size : shape)
    bytes *= static_cast<double>(size);
  GPIPE_CHECK(bytes <= memory, ConfigError, "a mini-batch of --batch-size ", o.batch_size,
              " inputs of ", c10::Join("x", shape), " for --model ", o.model.name(), " needs ",
              gib(bytes), " or more, and this machine has ", gib(memory), limit,
              "; choose a smaller batch or smaller inputs");
}

namespace {

// The rank this process is, for stop_on_lost_connection (a terminate handler takes no argument).
int terminating_rank = -1;

// LibTorch's own threads (the TCPStore client's listener in 1.13) throw on a connection reset
// when rank 0, which hosts the store, is gone, and nothing can catch it there: std::terminate
// then aborted the rank (exit 134) with "terminate called ... Connection reset by peer". This
// handler turns that into the exit 1 of a lost rank, naming it.
[[noreturn]] void stop_on_lost_connection() {
  std::string what = "an unknown exception";
  if (const auto error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = error_message(e);
    } catch (...) {
    }
  }
  std::fprintf(stderr,
               "rank %d stops: a thread of LibTorch's distributed engine failed (%s): rank 0, "
               "which hosts the rendezvous store, or a peer was lost\n",
               terminating_rank, what.c_str());
  std::fflush(stderr);
  std::_Exit(cli::kExitFailure);
}

// Joins the other ranks within the timeout, every phase counted: connecting to the store,
// registering, building the process groups. c10d's own waits do not all honour the timeout (a
// client of a port another server holds waited 30-60 s at --comm-timeout 3, and a stranger's
// half-sent query stalls the store rank 0 hosts), and each of its phases may take the whole
// timeout. At the deadline this rank says why and exits 1: the thread stuck inside c10d cannot
// be stopped, so its process is.
std::unique_ptr<distributed::Context> meet_ranks(const distributed::Env& env,
                                                 const distributed::ContextOptions& options) {
  terminating_rank = env.rank;
  std::set_terminate(stop_on_lost_connection);
  using Meeting = std::promise<std::unique_ptr<distributed::Context>>;
  auto meeting = std::make_shared<Meeting>();
  auto met = meeting->get_future();
  std::thread joiner([meeting, env, options] {
    try {
      meeting->set_value(std::make_unique<distributed::Context>(env, options));
    } catch (...) {
      meeting->set_exception(std::current_exception());
    }
  });
  const auto seconds = std::chrono::duration<double>(options.timeout()).count();
  if (met.wait_for(options.timeout()) != std::future_status::ready) {
    spdlog::error(
        "rank {} cannot {} at {}:{} and meet the other ranks of WORLD_SIZE={} within "
        "--comm-timeout {} s (is rank 0 running? are all ranks started? does another program "
        "listen on MASTER_PORT, or hold the store?)",
        env.rank, env.rank == 0 ? "host the rendezvous store" : "reach the master",
        printable(env.master_addr), env.master_port, env.world_size, seconds);
    spdlog::default_logger()->flush();
    std::_Exit(cli::kExitFailure);
  }
  joiner.join();
  return met.get();
}

}  // namespace

Trainer::Trainer(TrainOptions options) : options_(std::move(options)) {
  auto& o = options_;
  check_train_options(o);
  resolve_outputs();
  data_ = std::make_unique<TrainingData>(o);
  data_->apply_to(o.model);
  o.model.init_seed = o.seed;
  builder_ = models::make_model(o.model);
  check_fits_host(*builder_, o);
  data_->set_model(builder_.get());
  total_layers_ = builder_->num_layers();
  if (!o.plan.empty()) choose_plan();
  resolve_balance();

  auto pipe_options = to_pipeline_options(o.shape);
  pipe_options.seed(o.seed)
      .bucket_mb(o.bucket_mb)
      .sync_batchnorm(o.sync_batchnorm)
      .measure_memory(true);  // summary.json reports every device's peak
  const LossFn loss =
      o.label_smoothing > 0 ? cross_entropy_loss(o.label_smoothing) : builder_->loss();
  if (!o.distributed) {
    if (o.sync_batchnorm) spdlog::warn("--sync-batchnorm needs --distributed replicas: ignored");
    if (layers_.empty()) layers_ = builder_->build();
    pipeline_ = std::make_unique<Pipeline>(layers_, pipe_options, loss);
  } else {
    join_world(pipe_options, loss);
  }
  pipeline_->set_optimizer(make_optimizer_factory(o));
  pipeline_->set_grad_clip(o.grad_clip);
  if (!o.snapshot_dir.empty()) {
    const auto use = o.resume                ? FolderUse::kResume
                     : o.overwrite_snapshots ? FolderUse::kOverwrite
                                             : FolderUse::kFresh;
    snapshots_ = std::make_unique<SnapshotManager>(o.snapshot_dir, o.keep_snapshots, use, *world_);
  }
  restore();
  run_id_ = snapshots_ != nullptr ? snapshots_->run_id() : new_run_id();
  if (reports()) claim_output_dir();
}

namespace {
// What marks a folder as a run's results: the trainer's outputs, what
// experiments/run_amoebanet.sh writes beside them, and kOwnerFile.
constexpr const char* kOwnerFile = ".gpipe-run";  // the id of the run whose results these are
constexpr const char* kResultFiles[] = {"metrics.jsonl", "summary.json", "trace.json",
                                        "RUN.md",        "COMMAND",      kOwnerFile};
}  // namespace

void Trainer::claim_output_dir() {
  const auto& o = options_;
  if (o.output_dir.empty()) return;
  const auto dir = std::filesystem::path(o.output_dir);
  std::error_code error;
  std::vector<std::string> found;
  for (const char* name : kResultFiles) {
    if (std::filesystem::exists(std::filesystem::symlink_status(dir / name, error))) {
      found.push_back(name);
    }
  }
  std::string owner;
  if (std::filesystem::exists(dir / kOwnerFile)) {
    owner = read_file((dir / kOwnerFile).string(), "--output-dir's run id", 4096);
    while (!owner.empty() && std::isspace(static_cast<unsigned char>(owner.back())))
      owner.pop_back();
  }
  const bool own = o.resume && !owner.empty() && owner == run_id_;
  if (!found.empty() && !own) {
    GPIPE_CHECK(o.overwrite_results, ConfigError, "--output-dir '", o.output_dir,
                "' holds the results of another run (", c10::Join(", ", found),
                owner.empty() ? std::string() : "; run " + owner,
                "); choose another --output-dir, or pass --overwrite-results to replace them",
                o.resume ? " (a --resume appends only to the results of the run it resumes)" : "");
    spdlog::warn("--overwrite-results: deleting {} in {}", c10::Join(", ", found), o.output_dir);
    for (const auto& name : found)
      std::filesystem::remove(dir / name);
  }
  write_file((dir / kOwnerFile).string(), run_id_ + "\n");
}

void Trainer::resolve_outputs() {
  auto& o = options_;
  GPIPE_CHECK(!o.overwrite_results || !o.output_dir.empty(), ConfigError,
              "--overwrite-results needs --output-dir (the folder whose results it replaces)");
  if (!o.output_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(o.output_dir, error);
    GPIPE_CHECK(std::filesystem::is_directory(o.output_dir), ConfigError, "--output-dir '",
                o.output_dir, "' cannot be created: ", error.message());
    if (o.metrics.empty()) o.metrics = o.output_dir + "/metrics.jsonl";
    if (o.json.empty()) o.json = o.output_dir + "/summary.json";
    if (o.trace.empty()) o.trace = o.output_dir + "/trace.json";
  }
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--metrics", o.metrics},
        {"--json", o.json},
        {"--trace", o.trace}}) {
    if (!path.empty()) cli::check_output_file(path, flag);
  }
  check_distinct_outputs({{"--metrics", o.metrics}, {"--json", o.json}, {"--trace", o.trace}});
}

void Trainer::join_world(PipelineOptions pipe_options, const LossFn& loss) {
  auto& o = options_;
  const auto env = distributed::Env::from_environment();
  // Gloo writes to its sockets with writev, which raises SIGPIPE when the peer is gone: by
  // default that kills this process silently, before it can name the lost rank. Ignored, the
  // write fails with EPIPE and becomes a DistributedError (every Python process, PyTorch's
  // workers included, ignores SIGPIPE from its start).
  std::signal(SIGPIPE, SIG_IGN);
  context_ = meet_ranks(
      env, distributed::ContextOptions(o.shape.K)
               .timeout(std::chrono::milliseconds(static_cast<int64_t>(o.comm_timeout * 1000)))
               .sync_batchnorm(o.sync_batchnorm));
  world_ = context_.get();
  o.shape.R = context_->replicas();  // the launcher's choice (WORLD_SIZE / K), held in the shape
  {
    // Every rank must train the same run: compare the settings (with the balance as resolved).
    std::vector<std::pair<std::string, std::string>> settings;
    for (const auto& setting : settings_of(o))
      settings.emplace_back(setting.flag, setting.value);
    context_->check_same_settings(settings);
  }
  // A peer's failure ends this process too, with the lost rank named.
  const int rank = env.rank;
  auto* context = context_.get();
  context_->set_abort_handler([rank, context](const std::string& why) {
    spdlog::error("rank {} stops: {}", rank, why);
    spdlog::default_logger()->flush();
    context->linger_for_peers();
    std::_Exit(cli::kExitFailure);
  });
  const int64_t R = o.shape.R;
  GPIPE_CHECK(o.batch_size % R == 0, ConfigError, "--batch-size ", o.batch_size,
              " does not split evenly over ", R, " replicas");
  GPIPE_CHECK(o.shape.M <= o.batch_size / R, ConfigError, "--chunks ", o.shape.M,
              " exceeds each replica's ", o.batch_size / R, " samples");
  // This replica's slice of each micro-batch only.
  data_->shard(context_->replica(), R, o.shape.M);
  if (o.sync_batchnorm && R == 1) {
    spdlog::warn("--sync-batchnorm: a single replica, nothing to synchronise with");
  }
  if (o.shape.threads == 0) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int processes = local != nullptr ? std::max(1, std::atoi(local)) : 1;
    pipe_options.threads_per_device(std::max(1, hardware_threads() / processes));
  }
  // Build only this device's layers: the others live in other processes.
  const int64_t device = context_->device();
  const auto layout = make_layout(pipe_options, total_layers_);
  layers_.clear();
  for (int64_t s : layout.stages_of(device)) {
    const int64_t first = layout.stage_offset[s];
    for (auto& layer : builder_->build_range(first, first + layout.stage_balance[s]))
      layers_.push_back(std::move(layer));
  }
  pipeline_ = std::make_unique<Pipeline>(
      layers_, pipe_options, device,
      std::make_unique<distributed::ProcessGroupTransport>(*context_), context_.get(), loss);
}

Trainer::~Trainer() = default;

void Trainer::abort_peers(const std::string& why) {
  if (context_ == nullptr) return;
  context_->announce_failure(why);
  context_->linger_for_peers();
}

void Trainer::restore() {
  const auto& o = options_;
  if (o.resume) {
    std::string latest;
    const auto manifest = snapshots_->resume(*pipeline_, o.to_json(), &latest);
    position_.step = manifest.at("step").get<int64_t>();
    position_.epoch = manifest.at("epoch").get<int64_t>();
    position_.batch = manifest.at("batch").get<int64_t>();
    position_.losses = manifest.at("losses").get<std::vector<double>>();
    pipeline_->set_step(position_.step);
    if (reports()) {
      spdlog::info("resumed from {} at step {} (epoch {}, batch {})", latest, position_.step,
                   position_.epoch, position_.batch);
    }
  } else if (!o.finetune_from.empty()) {
    LoadReport report;
    // The paper's transfer protocol: every layer from the snapshot but the classifier head (the
    // model's last layer), which starts randomly initialised, and a fresh optimizer.
    // (pipeline_->layers() holds only this process's stages in a distributed run.)
    const int64_t head = total_layers_ - 1;
    SnapshotManager::load(
        *pipeline_, o.finetune_from,
        LoadOptions().optimizer(false).skip_mismatched_shapes(true).fresh_layers({head}),
        o.to_json(), &report);
    if (reports()) {
      spdlog::info("fine-tuning from {}: {} tensors loaded, new: {}",
                   SnapshotManager::resolve(o.finetune_from), report.loaded,
                   report.skipped.empty() ? "none" : c10::Join(", ", report.skipped));
    }
  }
}

int64_t Trainer::total_steps() const {
  const auto& o = options_;
  const int64_t per_epoch = data_->steps_per_epoch();
  if (o.steps > 0 && o.epochs > 0) return std::min(o.steps, o.epochs * per_epoch);
  if (o.steps > 0) return o.steps;
  if (o.epochs > 0) return o.epochs * per_epoch;
  return data_->synthetic() ? 10 : per_epoch;  // one epoch of real data, or 10 steps
}

models::SampleBatch Trainer::shard(models::SampleBatch batch) const {
  if (world_->replicas() == 1) return batch;
  const auto rows = torch::tensor(
      datasets::shard_positions(batch.input.size(0), world_->replica(), world_->replicas()));
  return {batch.input.index_select(0, rows), batch.target.index_select(0, rows)};
}

std::optional<Evaluation> Trainer::evaluate(int64_t epoch, int64_t step) {
  auto* loader = data_->test();
  if (loader == nullptr || options_.eval_every < 0) return std::nullopt;
  if (reports()) spdlog::info("evaluating at step {} on the test split", step);
  loader->begin_epoch(0);
  double correct1 = 0, correct5 = 0, count = 0;
  int64_t batches = 0;
  while (options_.eval_batches <= 0 || batches++ < options_.eval_batches) {
    auto batch = loader->next();
    if (!batch) break;
    const auto part = shard({batch->input, batch->target});
    if (part.input.size(0) == 0) continue;
    auto logits = pipeline_->forward(part.input);
    if (!logits.defined()) continue;  // the last stage is in another process
    auto target = part.target;
    if (logits.dim() == 3) {
      logits = logits.reshape({-1, logits.size(2)});
      target = target.reshape({-1});
    }
    const int64_t k = std::min<int64_t>(5, logits.size(1));
    const auto top = std::get<1>(logits.topk(k, 1));
    const auto hits = top.eq(target.to(top.device()).unsqueeze(1));
    correct1 += hits.select(1, 0).sum().item<double>();
    correct5 += hits.any(1).sum().item<double>();
    count += static_cast<double>(target.numel());
  }
  loader->end_epoch();
  const auto sums = world_->sum_over_world({correct1, correct5, count});
  correct1 = sums[0];
  correct5 = sums[1];
  count = sums[2];
  Evaluation e;
  e.epoch = epoch;
  e.step = step;
  e.examples = static_cast<int64_t>(count);
  e.top1 = count > 0 ? correct1 / count : 0;
  e.top5 = count > 0 ? correct5 / count : 0;
  return e;
}

// What a run reports as it goes: the progress bar or log, the metrics file, and the run's
// configuration as its snapshots record it.
struct Trainer::RunLog {
  Progress progress;
  MetricsLog metrics;
  nlohmann::json config;
};

TrainResult Trainer::run() {
  const auto& o = options_;
  TrainResult result;
  result.balance = o.shape.device_balance();
  result.parameters = builder_->count_parameters();
  const int64_t total = total_steps();
  const LrSchedule schedule(o, total, data_->steps_per_epoch());
  RunLog log{Progress(reports() ? o.progress : "off", total, o.log_every), MetricsLog(),
             o.to_json()};
  if (reports() && !o.metrics.empty())
    log.metrics = MetricsLog(o.metrics, o.resume ? position_.step : -1);
  if (reports()) {
    log.progress.info(
        c10::str("model ", o.model.name(), ": ", total_layers_, " layers, ", result.parameters,
                 " parameters; balance ", c10::Join(",", result.balance), ", M=", o.shape.M,
                 ", checkpoint ", to_string(o.shape.checkpoint), ", schedule ",
                 o.shape.schedule_name(), ", ", o.optimizer.name(), " lr ", o.optimizer.lr()));
    log.progress.info(
        c10::str("data: ", data_->describe(), "; ", total, " steps of batch ", o.batch_size));
  }

  const auto start = std::chrono::steady_clock::now();
  double timed_seconds = 0;
  int64_t timed_samples = 0;
  int64_t last_eval_step = -1;
  int64_t last_saved_step = o.resume ? position_.step : -1;
  data_->begin_epoch(position_.epoch, position_.batch);
  while (position_.step < total) {
    auto batch = data_->next();
    if (!batch) {  // the epoch is over
      if (o.eval_every > 0 && (position_.epoch + 1) % o.eval_every == 0) {
        if (auto e = evaluate(position_.epoch, position_.step)) {
          record_evaluation(*e, result, log);
          last_eval_step = position_.step;
        }
      }
      ++position_.epoch;
      position_.batch = 0;
      data_->begin_epoch(position_.epoch, 0);
      continue;
    }
    const double seconds = train_step(*batch, schedule.at(position_.step), result, log);
    if (result.step_seconds.size() > 1) {  // the first step allocates gradients and state
      timed_seconds += seconds;
      timed_samples += o.batch_size;
    }
    // The trace shows the last training step (an evaluation would replace the timeline).
    if (position_.step == total && !o.trace.empty() && reports()) {
      pipeline_->timeline().write_chrome_trace(o.trace);
    }
    if (o.save_every > 0 && position_.step % o.save_every == 0) {
      save_snapshot(result, log);
      last_saved_step = position_.step;
    }
  }
  log.progress.finish();
  result.train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (last_eval_step != position_.step) {
    if (auto e = evaluate(position_.epoch, position_.step)) record_evaluation(*e, result, log);
  }
  if (!result.evaluations.empty()) result.final_evaluation = result.evaluations.back();
  if (last_saved_step != position_.step) save_snapshot(result, log);

  result.losses = position_.losses;
  result.steps = position_.step;
  result.throughput_samples_per_s = timed_samples / std::max(timed_seconds, 1e-12);
  if (timed_samples == 0 && !result.step_seconds.empty()) {
    result.throughput_samples_per_s = o.batch_size / result.step_seconds.front();
  }
  result.bubble_fraction = pipeline_->last_step().bubble_fraction;
  result.param_checksum = pipeline_->param_checksum();
  if (o.distributed) gather_stage_peaks(result);
  return result;
}

double Trainer::train_step(const models::SampleBatch& mine, double lr, TrainResult& result,
                           RunLog& log) {
  const auto& o = options_;
  pipeline_->set_learning_rate(lr);
  const auto step_start = std::chrono::steady_clock::now();
  double loss = 0;
  try {
    loss = pipeline_->train_step(mine.input, mine.target);
  } catch (const NonFiniteLossError& e) {
    log.progress.finish();
    throw TrainingStopped(
        c10::str(e.what(), ". Training stopped at step ", position_.step, "; ",
                 snapshots_ && snapshots_->latest()
                     ? "the last good snapshot is " + *snapshots_->latest() +
                           " (continue with --resume and a lower --lr)"
                     : std::string("no snapshot was saved (use --snapshot-dir)")));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  ++position_.step;
  ++position_.batch;
  position_.losses.push_back(loss);
  result.step_seconds.push_back(seconds);
  const auto& last = pipeline_->last_step();
  result.record_step(last, data_->examples_loaded(), world_->replicas() > 1);
  log.progress.step(position_.step, position_.epoch, loss, lr, o.batch_size);
  nlohmann::json record = {{"step", position_.step},
                           {"epoch", position_.epoch},
                           {"loss", loss},
                           {"lr", lr},
                           {"samples_per_s", o.batch_size / std::max(seconds, 1e-12)},
                           {"bubble_fraction", last.bubble_fraction},
                           {"peak_bytes_per_device", last.peak_bytes}};
  if (pipeline_->loss_scaler().enabled()) {
    record["loss_scale"] = last.loss_scale;
    record["skipped"] = last.skipped;
    if (last.skipped && reports()) {
      log.progress.info(c10::str("step ", position_.step, ": gradients overflowed at loss scale ",
                                 last.loss_scale,
                                 "; the step was skipped on every device and "
                                 "the scale is now ",
                                 pipeline_->loss_scaler().scale()));
    }
  }
  log.metrics.write(record);
  return seconds;
}

void Trainer::save_snapshot(TrainResult& result, RunLog& log) {
  if (!snapshots_) return;
  result.last_snapshot = snapshots_->save(*pipeline_, position_, log.config);
  if (reports()) log.progress.info("saved " + result.last_snapshot);
}

void Trainer::record_evaluation(const Evaluation& e, TrainResult& result, RunLog& log) {
  result.evaluations.push_back(e);
  if (!reports()) return;
  log.progress.info(c10::str("epoch ", e.epoch, " (step ", e.step, "): test top-1 ", e.top1 * 100,
                             "%, top-5 ", e.top5 * 100, "% on ", e.examples, " examples"));
  log.metrics.write({{"step", e.step},
                     {"epoch", e.epoch},
                     {"test_top1", e.top1},
                     {"test_top5", e.top5},
                     {"test_examples", e.examples}});
}

void Trainer::gather_stage_peaks(TrainResult& result) {
  // Every process measured its own stage: gather the per-stage peaks of replica 0.
  const auto K = static_cast<size_t>(options_.shape.K);
  std::vector<double> peaks(2 * K, 0.0);
  if (world_->replica() == 0 && !result.peak_memory_bytes_per_device.empty()) {
    const auto s = static_cast<size_t>(world_->device());
    peaks[s] = static_cast<double>(result.peak_memory_bytes_per_device[0]);
    peaks[K + s] = static_cast<double>(result.peak_activation_bytes_per_device[0]);
  }
  peaks = world_->sum_over_world(peaks);
  result.peak_memory_bytes_per_device.clear();
  result.peak_activation_bytes_per_device.clear();
  for (size_t s = 0; s < K; ++s) {
    result.peak_memory_bytes_per_device.push_back(static_cast<int64_t>(peaks[s]));
    result.peak_activation_bytes_per_device.push_back(static_cast<int64_t>(peaks[K + s]));
  }
}

// ---- the balance: how many layers each device (and, with virtual stages, each virtual stage)
// holds, from --plan auto, --stage-balance, --balance or the exact partitioner ---------------

void Trainer::choose_plan() {
  auto& o = options_;
  GPIPE_CHECK(o.plan == "auto", ConfigError, "--plan ", o.plan,
              " is not a plan: use --plan auto (gpipe_plan prints the ranked plans)");
  GPIPE_CHECK(!o.distributed, ConfigError,
              "--plan auto plans this process's devices; for a distributed run take the command "
              "gpipe_plan prints");
  // The plan sets the balance; one given beside it would be dropped without a word.
  GPIPE_CHECK(o.shape.balance.empty(), ConfigError, "--plan auto chooses the balance itself, so ",
              o.shape.balance.describe(),
              " would be ignored: drop it, or drop --plan auto to run that balance");
  auto request = plan_request(o);
  request.max_replicas = 1;
  auto book = cost_book(o, request, "");
  const auto result = plan::search(book, request);
  GPIPE_CHECK(!result.ranked.empty(), ConfigError, nothing_fits(result, request));
  const auto& best = result.ranked.front();
  o.shape = best.shape;
  spdlog::info("--plan auto chose {} (of {} plans; predicted {:.1f} ms a step, {} per device)",
               best.shape.describe(), result.considered, best.step_ms,
               format_bytes(best.max_peak_bytes()));
}

void Trainer::resolve_balance() {
  auto& shape = options_.shape;
  const int64_t v = shape.virtual_stages();
  check_virtual_stages(shape.schedule, v);
  const auto given = shape.balance;
  if (given.per_stage()) {
    shape.K = devices_of_stage_balance(given.layers, shape.K, v);
    set_stage_balance(shape, given.layers);
    return;
  }
  if (!given.empty()) {
    const auto K = static_cast<int64_t>(given.layers.size());
    GPIPE_CHECK(shape.K == 0 || shape.K == K, ConfigError, given.describe(), " has ", K,
                " devices but --partitions is ", shape.K);
    shape.K = K;
    return;
  }
  shape.K = shape.K > 0 ? shape.K : 1;
  set_stage_balance(shape, balance_stages(shape.K * v));
}

std::vector<int64_t> Trainer::balance_stages(int64_t S) {
  const auto& o = options_;
  const int64_t K = o.shape.K;
  GPIPE_CHECK(K <= total_layers_, ConfigError, "--partitions ", K, " is larger than the model's ",
              total_layers_, " layers");
  const auto by = parse_balance_by(o.balance_by);
  // Profiled costs differ from process to process; every rank must agree on the balance.
  GPIPE_CHECK(!o.distributed || by == BalanceBy::kParams, ConfigError,
              "--distributed needs --balance a,b,.. or --balance-by params (got --balance-by ",
              o.balance_by, ", whose profile would differ between processes)");
  // With v virtual stages per device the exact partitioner cuts K*v stages; each device's
  // balance entry is then the sum of its stages.
  GPIPE_CHECK(S <= total_layers_, ConfigError, "--partitions ", K, " x ", S / K,
              " virtual stages is more stages than the model's ", total_layers_, " layers");
  if (S == 1) return {total_layers_};
  if (by == BalanceBy::kParams) {
    // Counted layer by layer: no need to hold the model.
    std::vector<double> costs;
    for (int64_t count : builder_->layer_parameters())
      costs.push_back(static_cast<double>(count));
    return balance_by_cost(costs, S);
  }
  layers_ = builder_->build();
  const auto sample = builder_->sample_batch((o.batch_size + o.shape.M - 1) / o.shape.M, o.seed);
  return auto_balance(layers_, S, by, {sample.input});
}

}  // namespace gpipe::train
