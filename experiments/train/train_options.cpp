#include "train/train_options.h"

#include <cstdio>
#include <filesystem>
#include <limits>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/models/model_flags.h"

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
      {"balance", balance},
      {"partitions", partitions},
      {"balance_by", balance_by},
      {"chunks", chunks},
      {"checkpoint", checkpoint},
      {"schedule", schedule},
      {"virtual_stages", virtual_stages},
      {"stage_balance", stage_balance},
      {"plan", plan},
      {"memory_per_device", memory_per_device},
      {"devices", devices},
      {"distributed", distributed},
      {"bucket_mb", bucket_mb},
      {"sync_batchnorm", sync_batchnorm},
      {"batch_size", batch_size},
      {"epochs", epochs},
      {"steps", steps},
      {"seed", seed},
      {"optimizer", optimizer},
      {"lr", lr},
      {"momentum", momentum},
      {"nesterov", nesterov},
      {"weight_decay", weight_decay},
      {"label_smoothing", label_smoothing},
      {"lr_schedule", lr_schedule},
      {"warmup_steps", warmup_steps},
      {"grad_clip", grad_clip},
  };
}

namespace {

// Bounds of the flags that size something (docs/design.md, "Bounds"): past them a run would
// grow memory or threads without doing anything useful.
constexpr int kMaxWorkers = 256;                 // data loader threads
constexpr int64_t kMaxBatch = int64_t{1} << 24;  // samples in a batch, and micro-batches
constexpr int64_t kMaxStages = 4096;             // K
constexpr int64_t kMaxVirtualStages = 64;        // v per device

// A list flag given as an empty string would silently mean "not given".
const CLI::Validator non_empty(
    [](std::string& value) {
      return value.empty() ? std::string("an empty value") : std::string();
    },
    "NON-EMPTY");

}  // namespace

void add_train_flags(CLI::App& app, TrainOptions& o) {
  // A flag given twice takes its last value, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto opt = [&](const char* group, const std::string& name, auto& value, const std::string& help) {
    return app.add_option(name, value, help)->capture_default_str()->group(group);
  };
  models::add_model_flags(app, o.model, "Model");

  const char* data = "Data";
  opt(data, "--dataset", o.dataset,
      "synthetic | fashion-mnist | mnist | cifar10 | cifar100 | imagenet");
  opt(data, "--data-dir", o.data_dir,
      "folder of the dataset's files (fashion-mnist: Debian's copy by default)");
  opt(data, "--workers", o.workers, "data loader threads")->check(CLI::Range(0, kMaxWorkers));
  app.add_flag("--skip-bad", o.skip_bad, "skip (and count) undecodable images")->group(data);
  app.add_flag("--augment,!--no-augment", o.augment, "training augmentation")
      ->capture_default_str()
      ->group(data);
  opt(data, "--cutout", o.cutout,
      "training augmentation: zero a random square of this many pixels a side (0: off)");
  opt(data, "--class-subset", o.class_subset,
      "train and test on these classes only, relabelled 0..n-1 in the order given (0-4, 5,7,9)");
  opt(data, "--eval-batch-size", o.eval_batch_size, "evaluation batch (0: --batch-size)")
      ->check(CLI::Range(int64_t{0}, kMaxBatch));

  const char* pipe = kPipelineGroup;
  opt(pipe, "--partitions,-K", o.partitions, "number of stages K (auto-balanced by --balance-by)")
      ->check(CLI::Range(int64_t{0}, kMaxStages));
  opt(pipe, "--balance", o.balance,
      "layers per stage, e.g. 3,3,2 (sets K; \"\" clears a preset's)");
  opt(pipe, "--balance-by", o.balance_by, "params | time | memory");
  opt(pipe, "--chunks,-M", o.chunks, "micro-batches per mini-batch")
      ->check(CLI::Range(int64_t{1}, kMaxBatch));
  opt(pipe, "--checkpoint", o.checkpoint, "re-materialisation: always | except_last | never");
  opt(pipe, "--schedule", o.schedule, "gpipe | 1f1b | interleaved-1f1b | zb-h1 | zbv");
  opt(pipe, "--virtual-stages", o.virtual_stages,
      "v stages per device for interleaved-1f1b (default 2) and zbv (2); each --balance entry "
      "must be a multiple of v")
      ->check(CLI::Range(int64_t{0}, kMaxVirtualStages));
  opt(pipe, "--stage-balance", o.stage_balance,
      "layers per virtual stage in stage order (K*v entries), for v > 1; sets --balance")
      ->check(non_empty);
  opt(pipe, "--devices", o.devices, "one per stage: cpu:0,cpu:1 or cuda:0,cuda:1")
      ->check(non_empty);
  opt(pipe, "--threads-per-device", o.threads_per_device,
      "intra-op threads per device (0: 1 when K > 1, all cores when K = 1)");

  const char* plan = kPlanningGroup;
  opt(plan, "--plan", o.plan,
      "auto: measure the model and run the fastest configuration that fits --memory-per-device "
      "(sets K, balance, M, schedule, v, checkpoint and threads; see gpipe_plan)");
  opt(plan, "--memory-per-device", o.memory_per_device,
      "memory of each device for planning, e.g. 512MiB, 8GiB (empty: no limit)");

  const char* dist = "Distributed";
  app.add_flag("--distributed", o.distributed,
               "one stage per process over c10d; world = K stages x R replicas, rank = "
               "replica*K + stage (start with scripts/launch.sh)")
      ->group(dist);
  opt(dist, "--comm-timeout", o.comm_timeout,
      "seconds to wait for a peer before declaring it lost");
  opt(dist, "--bucket-mb", o.bucket_mb,
      "with replicas: gradients are summed in buckets of this many MiB, each as soon as its "
      "gradients are final, overlapping the backward");
  app.add_flag("--sync-batchnorm", o.sync_batchnorm,
               "with replicas: BatchNorm normalises each micro-batch by its statistics over "
               "every replica, so R replicas at --batch-size N train as one at N")
      ->group(dist);

  const char* train = "Training";
  opt(train, "--batch-size", o.batch_size, "mini-batch size N (over all replicas)")
      ->check(CLI::Range(int64_t{1}, kMaxBatch));
  opt(train, "--epochs", o.epochs, "epochs of the training split")->check(CLI::NonNegativeNumber);
  opt(train, "--steps", o.steps, "training steps (caps --epochs; synthetic data needs it)")
      ->check(CLI::NonNegativeNumber);
  opt(train, "--seed", o.seed, "seed of initialisation, data order, augmentation and dropout");
  opt(train, "--optimizer", o.optimizer, "sgd | rmsprop | adam | adamw");
  opt(train, "--lr", o.lr, "peak learning rate");
  opt(train, "--momentum", o.momentum, "SGD / RMSprop momentum");
  app.add_flag("--nesterov", o.nesterov, "Nesterov momentum (SGD)")->group(train);
  opt(train, "--weight-decay", o.weight_decay, "L2 weight decay");
  opt(train, "--rmsprop-decay", o.rmsprop_decay, "RMSprop decay of the squared average");
  opt(train, "--rmsprop-eps", o.rmsprop_eps, "RMSprop epsilon");
  opt(train, "--adam-beta1", o.adam_beta1, "Adam beta1");
  opt(train, "--adam-beta2", o.adam_beta2, "Adam beta2");
  opt(train, "--adam-eps", o.adam_eps, "Adam epsilon");
  opt(train, "--label-smoothing", o.label_smoothing, "label smoothing of the cross-entropy");
  opt(train, "--lr-schedule", o.lr_schedule, "constant | cosine | exponential (after warm-up)");
  opt(train, "--warmup-steps", o.warmup_steps, "linear warm-up steps");
  opt(train, "--lr-decay", o.lr_decay, "exponential schedule: factor per --lr-decay-epochs");
  opt(train, "--lr-decay-epochs", o.lr_decay_epochs, "exponential schedule: epochs per decay");
  opt(train, "--min-lr", o.min_lr, "cosine schedule: final learning rate");
  opt(train, "--grad-clip", o.grad_clip, "clip the global gradient norm (0: off)");
  opt(train, "--eval-every", o.eval_every,
      "evaluate the test split every N epochs (0: only at the end; -1: never)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  opt(train, "--eval-batches", o.eval_batches,
      "evaluate on the first N batches of the test split (0: all of it)")
      ->check(CLI::NonNegativeNumber);

  const char* ckpt = "Snapshots";
  opt(ckpt, "--snapshot-dir", o.snapshot_dir, "folder of snapshots (step-N/ and latest)");
  opt(ckpt, "--save-every", o.save_every, "save every N steps (0: at the end only)");
  app.add_flag("--resume", o.resume, "continue from the latest snapshot in --snapshot-dir")
      ->group(ckpt);
  app.add_flag("--overwrite-snapshots", o.overwrite_snapshots,
               "start a new run in a --snapshot-dir that holds another run's snapshots, deleting "
               "them (without it such a folder is refused)")
      ->group(ckpt);
  opt(ckpt, "--finetune-from", o.finetune_from,
      "start from a snapshot's weights (folder or its step-N/) but the last layer (the "
      "classifier head, randomly initialised), with a fresh optimizer");
  opt(ckpt, "--keep-snapshots", o.keep_snapshots, "how many snapshots to keep");

  const char* out = "Output";
  opt(out, "--output-dir", o.output_dir, "write metrics.jsonl, summary.json and trace.json here");
  opt(out, "--metrics", o.metrics, "JSON lines of per-step and per-evaluation metrics");
  opt(out, "--trace", o.trace, "Chrome trace of the last step");
  opt(out, "--json", o.json, "summary JSON");
  opt(out, "--log-every", o.log_every, "log every N steps when not drawing a progress bar");
  opt(out, "--progress", o.progress, "auto (a bar on a terminal) | bar | log | off");
  opt(out, "--log-level", o.log_level, "debug | info | warn | error");
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
