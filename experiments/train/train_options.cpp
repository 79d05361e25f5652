#include "train/train_options.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/datasets/class_subset.h"
#include "gpipe/datasets/factory.h"
#include "gpipe/device.h"
#include "gpipe/errors.h"
#include "gpipe/models/model_flags.h"
#include "gpipe/models/registry.h"
#include "gpipe/schedule.h"
#include "gpipe/stage.h"
#include "presets_dir.h"  // generated: GPIPE_PRESETS_DIR
#include "train/snapshot_manager.h"

#ifndef GPIPE_PRESETS_DIR
#define GPIPE_PRESETS_DIR "experiments/presets"
#endif

namespace gpipe::train {

nlohmann::json TrainOptions::to_json() const {
  return {
      {"model", models::to_json(model)},
      {"dataset", dataset},
      {"data_dir", data_dir},
      {"cutout", cutout},
      {"class_subset", class_subset},
      {"balance", c10::Join(",", shape.device_balance())},
      {"partitions", shape.K},
      {"balance_by", balance_by},
      {"chunks", shape.M},
      {"checkpoint", to_string(shape.checkpoint)},
      {"schedule", shape.schedule_name()},
      {"virtual_stages", shape.v},
      {"stage_balance", c10::Join(",", shape.balance.explicit_stages())},
      {"plan", plan},
      {"memory_per_device", memory_per_device},
      {"devices",
       planning_cores > 0 ? std::to_string(planning_cores) : c10::Join(",", shape.devices)},
      {"distributed", distributed},
      {"bucket_mb", bucket_mb},
      {"sync_batchnorm", sync_batchnorm},
      {"batch_size", batch_size},
      {"epochs", epochs},
      {"steps", steps},
      {"seed", seed},
      {"optimizer", optimizer.name()},
      {"lr", optimizer.lr()},
      {"momentum", optimizer.momentum()},
      {"nesterov", optimizer.nesterov()},
      {"weight_decay", optimizer.weight_decay()},
      {"label_smoothing", label_smoothing},
      {"lr_schedule", lr_schedule},
      {"warmup_steps", warmup_steps},
      {"grad_clip", grad_clip},
      {"precision", to_string(shape.precision)},
      {"settings",
       [this] {
         nlohmann::json out = nlohmann::json::object();
         for (const auto& setting : settings_of(*this))
           if (setting.kept_by_resume) out[setting.flag] = setting.value;
         return out;
       }()},
  };
}

namespace {
// A value as a setting shows it: text as it is, numbers as JSON writes them (17 digits at most,
// and the same text for the same double on every rank).
std::string setting_text(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}
}  // namespace

std::vector<Setting> settings_of(const TrainOptions& o) {
  std::vector<Setting> out;
  auto add = [&out](std::string flag, const nlohmann::json& value, bool kept) {
    out.push_back({std::move(flag), setting_text(value), kept});
  };
  // Held here: a range over items() of a temporary would outlive the object (ASan found it).
  const auto model = models::to_json(o.model);
  for (const auto& [key, value] : model.items())
    add(key == "name" ? "--model" : models::knob_flag(key), value, true);
  const auto& opt = o.optimizer;
  const std::pair<const char*, nlohmann::json> kept[] = {
      {"--dataset", o.dataset},
      {"--class-subset", o.class_subset},
      {"--augment", o.augment},
      {"--cutout", o.cutout},
      {"--batch-size", o.batch_size},
      {"--seed", o.seed},
      {"--optimizer", opt.name()},
      {"--lr", opt.lr()},
      {"--momentum", opt.momentum()},
      {"--nesterov", opt.nesterov()},
      {"--weight-decay", opt.weight_decay()},
      {"--rmsprop-decay", opt.rmsprop_decay()},
      {"--rmsprop-eps", opt.rmsprop_eps()},
      {"--adam-beta1", opt.adam_beta1()},
      {"--adam-beta2", opt.adam_beta2()},
      {"--adam-eps", opt.adam_eps()},
      {"--label-smoothing", o.label_smoothing},
      {"--lr-schedule", o.lr_schedule},
      {"--warmup-steps", o.warmup_steps},
      {"--lr-decay", o.lr_decay},
      {"--lr-decay-epochs", o.lr_decay_epochs},
      {"--min-lr", o.min_lr},
      {"--grad-clip", o.grad_clip},
      {"--precision", to_string(o.shape.precision)},
      {"--sync-batchnorm", o.sync_batchnorm},
  };
  for (const auto& [flag, value] : kept)
    add(flag, value, true);
  const std::pair<const char*, nlohmann::json> layout[] = {
      {"--epochs", o.epochs},
      {"--skip-bad", o.skip_bad},
      {"--steps", o.steps},
      {"--partitions", o.shape.K},
      {"--balance", c10::Join(",", o.shape.device_balance())},
      {"--stage-balance", c10::Join(",", o.shape.balance.explicit_stages())},
      {"--chunks", o.shape.M},
      {"--schedule", o.shape.schedule_name()},
      {"--virtual-stages", o.shape.v},
      {"--checkpoint", to_string(o.shape.checkpoint)},
      {"--bucket-mb", o.bucket_mb},
      {"--comm-timeout", o.comm_timeout},
      {"--eval-every", o.eval_every},
      {"--eval-batches", o.eval_batches},
      {"--eval-batch-size", o.eval_batch_size},
      {"--save-every", o.save_every},
      {"--keep-snapshots", o.keep_snapshots},
      {"--resume", o.resume},
  };
  for (const auto& [flag, value] : layout)
    add(flag, value, false);
  return out;
}

void check_resume_settings(const nlohmann::json& saved, const nlohmann::json& run,
                           const std::string& path) {
  const auto before = saved.is_object() ? saved.value("settings", nlohmann::json()) : nullptr;
  const auto now = run.is_object() ? run.value("settings", nlohmann::json()) : nullptr;
  if (!before.is_object() || !now.is_object()) return;
  auto shown = [](const nlohmann::json& value) {
    const auto text = setting_text(value);
    return text.empty() ? std::string("''") : printable(text);
  };
  std::vector<std::string> differences;
  for (const auto& [flag, value] : now.items()) {
    if (!before.contains(flag) || before[flag] == value) continue;
    differences.push_back(
        c10::str(flag, " ", shown(value), " (the snapshot's: ", shown(before[flag]), ")"));
  }
  GPIPE_CHECK(differences.empty(), ConfigError, "--resume: this run differs from the snapshot ",
              path, " in ", c10::Join(", ", differences),
              "; resume with the snapshot's settings, or start a new run from its weights with "
              "--finetune-from (a resume may change only ",
              kResumeMayChange, ")");
}

namespace {

// Bounds of the flags that size something (docs/design.md, "Bounds"): past them a run would
// grow memory or threads without doing anything useful.
constexpr int kMaxWorkers = 256;                 // data loader threads
constexpr int64_t kMaxBatch = int64_t{1} << 24;  // samples in a batch, and micro-batches
constexpr int64_t kMaxImageSide = 1 << 14;       // pixels (as the models' --image-size)
constexpr int64_t kMaxEpochs = 1000000;
constexpr int64_t kMaxSteps = int64_t{1} << 32;
constexpr double kMaxSeconds = 1e6;  // a peer's time-out
constexpr double kMaxRate = 1e30;  // learning rates and weight decay (finite; train.nonfinite_loss
                                   // makes a run diverge with 1e30)

// A flag with a value, its default shown in --help, in `group`.
template <typename T>
CLI::Option* opt(CLI::App& app, const char* group, const std::string& name, T& value,
                 const std::string& help) {
  return app.add_option(name, value, help)->capture_default_str()->group(group);
}

// Where the samples come from and how they are prepared.
void add_data_flags(CLI::App& app, TrainOptions& o) {
  const char* data = "Data";
  opt(app, data, "--dataset", o.dataset,
      "synthetic (batches the model makes) | synthetic-tokens (1024 fixed token sequences, "
      "through the loader; transformer-l) | fashion-mnist | mnist | cifar10 | cifar100 | imagenet")
      ->check(CLI::IsMember(datasets::dataset_names()));
  opt(app, data, "--data-dir", o.data_dir,
      "folder of the dataset's files (fashion-mnist: Debian's copy by default)")
      ->check(CLI::ExistingDirectory);
  opt(app, data, "--workers", o.workers, "data loader threads")
      ->check(cli::int_range(0, kMaxWorkers));
  app.add_flag("--skip-bad", o.skip_bad, "skip (and count) undecodable images")->group(data);
  app.add_flag("--augment,!--no-augment", o.augment, "training augmentation")
      ->capture_default_str()
      ->group(data);
  opt(app, data, "--cutout", o.cutout,
      "training augmentation: zero a random square of this many pixels a side (0: off)")
      ->check(cli::int_range(int64_t{0}, kMaxImageSide));
  opt(app, data, "--class-subset", o.class_subset,
      "train and test on these classes only, relabelled 0..n-1 in the order given (0-4, 5,7,9)")
      ->check(cli::parsed_by([](const std::string& v) { datasets::parse_class_list(v); }));
  opt(app, data, "--eval-batch-size", o.eval_batch_size, "evaluation batch (0: --batch-size)")
      ->check(cli::int_range(int64_t{0}, kMaxBatch));
}

// The pipeline's shape, how it is balanced, and --plan auto.
void add_pipeline_flags(CLI::App& app, TrainOptions& o) {
  const char* pipe = kPipelineGroup;
  add_shape_flags(app, o.shape, o.planning_cores, pipe);
  opt(app, pipe, "--balance-by", o.balance_by, "params | time | memory")
      ->check(CLI::IsMember({"params", "time", "memory"}));

  const char* plan = kPlanningGroup;
  opt(app, plan, "--plan", o.plan,
      "auto: measure the model and run the fastest configuration that fits --memory-per-device "
      "(sets K, balance, M, schedule, v, checkpoint and threads; see gpipe_plan)")
      ->check(CLI::IsMember({"", "auto"}));
  opt(app, plan, "--memory-per-device", o.memory_per_device,
      "memory of each device for planning, e.g. 512MiB, 8GiB (empty: no limit)")
      ->check(cli::parsed_by([](const std::string& v) {
        if (!v.empty()) parse_bytes(v, "");
      }));
}

// Stages and replicas in separate processes.
void add_distributed_flags(CLI::App& app, TrainOptions& o) {
  const char* dist = "Distributed";
  app.add_flag("--distributed", o.distributed,
               "one stage per process over c10d; world = K stages x R replicas, rank = "
               "replica*K + stage (start with scripts/launch.sh)")
      ->group(dist);
  opt(app, dist, "--comm-timeout", o.comm_timeout,
      "seconds to wait for a peer before declaring it lost")
      ->check(cli::finite_range(0, kMaxSeconds, cli::Interval::kOpenLow));
  opt(app, dist, "--bucket-mb", o.bucket_mb,
      "with replicas: gradients are summed in buckets of this many MiB, each as soon as its "
      "gradients are final, overlapping the backward")
      ->check(cli::finite_range(0, 1 << 20, cli::Interval::kOpenLow));
  app.add_flag("--sync-batchnorm", o.sync_batchnorm,
               "with replicas: BatchNorm normalises each micro-batch by its statistics over "
               "every replica, so R replicas at --batch-size N train as one at N")
      ->group(dist);
}

// Length, optimizer, learning-rate schedule and evaluation.
void add_training_flags(CLI::App& app, TrainOptions& o) {
  const char* train = "Training";
  opt(app, train, "--batch-size", o.batch_size, "mini-batch size N (over all replicas)")
      ->check(cli::int_range(int64_t{1}, kMaxBatch));
  opt(app, train, "--epochs", o.epochs, "epochs of the training split")
      ->check(cli::int_range(int64_t{0}, kMaxEpochs));
  opt(app, train, "--steps", o.steps, "training steps (caps --epochs; synthetic data needs it)")
      ->check(cli::int_range(int64_t{0}, kMaxSteps));
  opt(app, train, "--seed", o.seed, "seed of initialisation, data order, augmentation and dropout");
  opt(app, train, "--optimizer", o.optimizer.name(), "sgd | rmsprop | adam | adamw")
      ->check(CLI::IsMember({"sgd", "rmsprop", "adam", "adamw"}));
  const auto below_one = cli::finite_range(0, 1, cli::Interval::kOpenHigh);
  const auto epsilon = cli::finite_range(0, 1, cli::Interval::kOpenLow);
  const auto rate = cli::finite_range(0, kMaxRate);
  opt(app, train, "--lr", o.optimizer.lr(), "peak learning rate")
      ->check(cli::finite_range(0, kMaxRate, cli::Interval::kOpenLow));
  opt(app, train, "--momentum", o.optimizer.momentum(), "SGD / RMSprop momentum")->check(below_one);
  app.add_flag("--nesterov", o.optimizer.nesterov(), "Nesterov momentum (SGD)")->group(train);
  opt(app, train, "--weight-decay", o.optimizer.weight_decay(), "L2 weight decay")->check(rate);
  opt(app, train, "--rmsprop-decay", o.optimizer.rmsprop_decay(),
      "RMSprop decay of the squared average")
      ->check(below_one);
  opt(app, train, "--rmsprop-eps", o.optimizer.rmsprop_eps(), "RMSprop epsilon")->check(epsilon);
  opt(app, train, "--adam-beta1", o.optimizer.adam_beta1(), "Adam beta1")->check(below_one);
  opt(app, train, "--adam-beta2", o.optimizer.adam_beta2(), "Adam beta2")->check(below_one);
  opt(app, train, "--adam-eps", o.optimizer.adam_eps(), "Adam epsilon")->check(epsilon);
  opt(app, train, "--label-smoothing", o.label_smoothing, "label smoothing of the cross-entropy")
      ->check(below_one);
  opt(app, train, "--lr-schedule", o.lr_schedule, "constant | cosine | exponential (after warm-up)")
      ->check(CLI::IsMember({"constant", "cosine", "exponential"}));
  opt(app, train, "--warmup-steps", o.warmup_steps, "linear warm-up steps")
      ->check(cli::int_range(int64_t{0}, kMaxSteps));
  opt(app, train, "--lr-decay", o.lr_decay, "exponential schedule: factor per --lr-decay-epochs")
      ->check(epsilon);
  opt(app, train, "--lr-decay-epochs", o.lr_decay_epochs, "exponential schedule: epochs per decay")
      ->check(cli::finite_range(0, kMaxEpochs, cli::Interval::kOpenLow));
  opt(app, train, "--min-lr", o.min_lr, "cosine schedule: final learning rate")->check(rate);
  opt(app, train, "--grad-clip", o.grad_clip, "clip the global gradient norm (0: off)")
      ->check(cli::finite_range(0, 1e30));
  cli::add_precision_flag(
      app, o.shape.precision,
      "what the stages compute in and send between devices: fp32 | bf16 | fp16. Master "
      "weights, optimizer, BatchNorm statistics and loss stay fp32. bf16 has fp32's range and "
      "needs no loss scaling; fp16 scales the loss dynamically (from 65536, halved on an "
      "overflow anywhere, which skips that step on every device; doubled after 2000 clean "
      "steps; kept in snapshots). fp16 on CPU needs the LibTorch 2.x build")
      ->group(train);
  opt(app, train, "--eval-every", o.eval_every,
      "evaluate the test split every N epochs (0: only at the end; -1: never)")
      ->check(cli::int_range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  opt(app, train, "--eval-batches", o.eval_batches,
      "evaluate on the first N batches of the test split (0: all of it)")
      ->check(cli::int_range(int64_t{0}, kMaxBatch));
}

// Saving, resuming and fine-tuning.
void add_snapshot_flags(CLI::App& app, TrainOptions& o) {
  const char* ckpt = "Snapshots";
  opt(app, ckpt, "--snapshot-dir", o.snapshot_dir, "folder of snapshots (step-N/ and latest)")
      ->check(cli::output_folder());
  opt(app, ckpt, "--save-every", o.save_every, "save every N steps (0: at the end only)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", o.resume,
               std::string("continue from the latest snapshot in --snapshot-dir; the model, data, "
                           "optimizer, learning-rate schedule, seed and batch size must be the "
                           "snapshot's (checked), while ") +
                   kResumeMayChange + " may change")
      ->group(ckpt);
  app.add_flag("--overwrite-snapshots", o.overwrite_snapshots,
               "start a new run in a --snapshot-dir that holds another run's snapshots, deleting "
               "them (without it such a folder is refused)")
      ->group(ckpt);
  opt(app, ckpt, "--finetune-from", o.finetune_from,
      "start from a snapshot's weights (folder or its step-N/) but the last layer (the "
      "classifier head, randomly initialised), with a fresh optimizer")
      ->check(cli::parsed_by([](const std::string& path) { SnapshotManager::resolve(path); }));
  opt(app, ckpt, "--keep-snapshots", o.keep_snapshots, "how many snapshots to keep")
      ->check(CLI::NonNegativeNumber);
}

// Files written and what is logged.
void add_output_flags(CLI::App& app, TrainOptions& o) {
  const char* out = "Output";
  opt(app, out, "--output-dir", o.output_dir,
      "write metrics.jsonl, summary.json and trace.json here")
      ->check(cli::output_folder());
  app.add_flag("--overwrite-results", o.overwrite_results,
               "start a new run in an --output-dir that holds another run's results, deleting "
               "them (without it such a folder is refused; a --resume appends to its own run's)")
      ->group(out);
  opt(app, out, "--metrics", o.metrics, "JSON lines of per-step and per-evaluation metrics")
      ->check(cli::output_file());
  opt(app, out, "--trace", o.trace, "Chrome trace of the last step")->check(cli::output_file());
  opt(app, out, "--json", o.json, "summary JSON")->check(cli::output_file());
  opt(app, out, "--log-every", o.log_every, "log every N steps when not drawing a progress bar")
      ->check(CLI::NonNegativeNumber);
  opt(app, out, "--progress", o.progress, "auto (a bar on a terminal) | bar | log | off")
      ->check(CLI::IsMember({"auto", "bar", "log", "off"}));
  cli::add_log_level_flag(app, o.log_level)->group(out);
}

}  // namespace

void add_train_flags(CLI::App& app, TrainOptions& o) {
  // A flag given twice takes its last value, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  models::add_model_flags(app, o.model, "Model");
  add_data_flags(app, o);
  add_pipeline_flags(app, o);
  add_distributed_flags(app, o);
  add_training_flags(app, o);
  add_snapshot_flags(app, o);
  add_output_flags(app, o);
}

void check_train_options(const TrainOptions& o) {
  GPIPE_CHECK(o.batch_size >= 1, ConfigError, "--batch-size must be >= 1, got ", o.batch_size);
  GPIPE_CHECK(o.steps >= 0 && o.epochs >= 0, ConfigError, "--steps and --epochs must be >= 0, got ",
              o.steps, " and ", o.epochs);
  GPIPE_CHECK(o.shape.M >= 1 && o.shape.M <= o.batch_size, ConfigError, "--chunks ", o.shape.M,
              " must be between 1 and --batch-size ", o.batch_size);
  GPIPE_CHECK(o.comm_timeout > 0, ConfigError, "--comm-timeout must be > 0 s, got ",
              o.comm_timeout);
  const std::vector<std::string> cpu{"cpu"};
  for (const auto& device : o.shape.devices.empty() ? cpu : o.shape.devices)
    check_precision_supported(o.shape.precision, DeviceSpec::parse(device));
  GPIPE_CHECK(o.label_smoothing >= 0 && o.label_smoothing < 1, ConfigError,
              "--label-smoothing must be in [0, 1), got ", o.label_smoothing);
  GPIPE_CHECK(o.min_lr <= o.optimizer.lr(), ConfigError, "--min-lr ", o.min_lr, " exceeds --lr ",
              o.optimizer.lr());
  GPIPE_CHECK(o.optimizer.name() != "sgd" || !o.optimizer.nesterov() || o.optimizer.momentum() > 0,
              ConfigError, "--nesterov needs --momentum > 0");
  GPIPE_CHECK(!o.resume || !o.snapshot_dir.empty(), ConfigError,
              "--resume needs --snapshot-dir (where the snapshots are)");
  GPIPE_CHECK(!o.overwrite_snapshots || !o.snapshot_dir.empty(), ConfigError,
              "--overwrite-snapshots needs --snapshot-dir (the folder whose snapshots it deletes)");
  GPIPE_CHECK(!o.overwrite_snapshots || !o.resume, ConfigError,
              "--overwrite-snapshots and --resume exclude each other: resume continues the run "
              "whose snapshots the folder holds, overwrite deletes them");
  GPIPE_CHECK(!o.resume || o.finetune_from.empty(), ConfigError,
              "--resume and --finetune-from exclude each other: resume continues a run, "
              "fine-tuning starts a new one from another run's weights");
}

std::string presets_dir() {
  return GPIPE_PRESETS_DIR;
}

std::vector<std::string> expand_preset(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string name;
    if (args[i] == "--preset" && i + 1 < args.size()) {
      name = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
    } else if (args[i].rfind("--preset=", 0) == 0) {
      name = args[i].substr(9);
      args.erase(args.begin() + static_cast<long>(i));
    } else {
      continue;
    }
    const auto path = std::filesystem::path(presets_dir()) / (name + ".toml");
    if (!std::filesystem::exists(path)) {
      std::vector<std::string> known;
      if (std::filesystem::is_directory(presets_dir())) {
        for (const auto& e : std::filesystem::directory_iterator(presets_dir())) {
          if (e.path().extension() == ".toml") known.push_back(e.path().stem().string());
        }
      }
      std::sort(known.begin(), known.end());
      throw ConfigError(c10::str("unknown preset '", name, "': no ", path.string(),
                                 "; presets: ", c10::Join(", ", known)));
    }
    args.insert(args.begin() + 1, {"--config", path.string()});
    break;
  }
  return args;
}

int run_with_presets(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  std::vector<std::string> args;
  try {
    args = expand_preset(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", error_message(e).c_str());
    return cli::kExitBadInput;
  }
  std::vector<char*> pointers;
  for (auto& a : args)
    pointers.push_back(a.data());
  return cli::run_main(app, static_cast<int>(pointers.size()), pointers.data(), body);
}

}  // namespace gpipe::train
