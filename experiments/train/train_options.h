// The trainer's options and their command-line flags.
//
// Why this file exists: gpipe_train, experiments/run_amoebanet.sh and the table drivers all
// describe a training run the same way; one struct and one place that declares its flags keeps
// them in step, and lets a TOML preset (--config FILE or --preset NAME) set any of them.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "common/optimizers.h"
#include "common/shape_flags.h"
#include "gpipe/models/registry.h"

namespace gpipe::train {

struct TrainOptions {
  TrainOptions() : model("mlp") {}

  models::ModelConfig model;

  // Data: "synthetic" draws the model's own sample batches; the others read real data.
  std::string dataset =
      "synthetic";  // synthetic | fashion-mnist | mnist | cifar10 | cifar100 | imagenet
  std::string data_dir;
  int64_t workers = 2;
  bool skip_bad = false;
  bool augment = true;
  int64_t cutout = 0;           // with augment: cutout side in pixels (0: off)
  std::string class_subset;     // "0-4": only these classes, relabelled 0..n-1 (empty: all)
  int64_t eval_batch_size = 0;  // 0: --batch-size

  // Pipeline: K, M, schedule, v, re-materialisation, balances, devices, threads, precision (R
  // comes from the world of a distributed run; --precision is a Training flag).
  PipelineShape shape;
  std::string balance_by = "params";  // when shape has no balance
  // "auto": the best plan of gpipe_plan (plan/planner.h) for memory_per_device sets `shape`.
  std::string plan;
  std::string memory_per_device;  // "8GiB"; empty: no limit
  int64_t planning_cores = 0;     // --devices N: plan for N cores (0: this machine's)

  // Distributed: stages in separate processes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
  bool distributed = false;
  double comm_timeout = 60.0;   // seconds
  double bucket_mb = 25.0;      // gradient all-reduce bucket (MiB)
  bool sync_batchnorm = false;  // BatchNorm statistics over the replicas of each stage

  // Length: --steps, or --epochs of the training split (--steps caps them when both are set).
  int64_t batch_size = 64;
  int64_t epochs = 0;
  int64_t steps = 0;
  uint64_t seed = 0;

  // Optimisation.
  // The optimizer and its settings (common/optimizers.h): sgd | rmsprop | adam | adamw.
  cli::OptimizerSettings optimizer =
      cli::OptimizerSettings("sgd").lr(0.05).momentum(0.9).rmsprop_eps(1e-3);
  double label_smoothing = 0.0;
  std::string lr_schedule = "constant";  // constant | cosine | exponential
  int64_t warmup_steps = 0;
  double lr_decay = 0.97;  // exponential: factor per --lr-decay-epochs
  double lr_decay_epochs = 2.4;
  double min_lr = 0.0;  // cosine floor
  double grad_clip = 0.0;

  // Evaluation of the test split, every N epochs and at the end (0: only at the end).
  int64_t eval_every = 1;
  // Batches of the test split each evaluation reads (0: all of it).
  int64_t eval_batches = 0;

  // Snapshots.
  std::string snapshot_dir;
  int64_t save_every = 0;  // steps; 0: only at the end
  bool resume = false;
  bool overwrite_snapshots = false;  // a new run deletes the snapshots --snapshot-dir holds
  std::string finetune_from;
  int64_t keep_snapshots = 2;

  // Outputs.
  std::string output_dir;          // metrics.jsonl, summary.json, trace.json unless given apart
  bool overwrite_results = false;  // a new run replaces another run's results in output_dir
  std::string metrics;
  std::string trace;
  std::string json;
  int64_t log_every = 10;
  std::string progress = "auto";  // auto | bar | log | off
  std::string log_level = "info";

  // Everything above, for manifests and summaries; "settings" holds settings_of()'s, by flag.
  nlohmann::json to_json() const;
};

// A setting that two processes of one run, or a run and the snapshot it resumes, must agree on:
// its flag and its value. The checks that compare runs (a resume against its snapshot's
// manifest, the ranks of a distributed run at rendezvous) read this one list, so what must
// match is said once. Where a process's data and devices are, its threads and its outputs are
// its own and are not listed.
struct Setting {
  std::string flag;  // "--lr", "--layers"
  std::string value;
  // A resume keeps it: the model, the data and its order, the optimizer, the learning-rate
  // schedule and the seed. The others lay the run out (its length, K, M, schedule, balance,
  // re-materialisation, evaluation and saving): every rank must agree on them, and a resume may
  // change them on purpose (a snapshot loads at any K; a run is extended by more --steps).
  bool kept_by_resume = true;
};
std::vector<Setting> settings_of(const TrainOptions& options);
// What --help says a resume may change.
inline constexpr const char* kResumeMayChange =
    "--steps, --epochs, --skip-bad, -K, --balance, --stage-balance, --chunks, --schedule, "
    "--virtual-stages, --checkpoint, --devices, the threads, evaluation, saving and outputs";
// Throws ConfigError naming each setting a resume must keep whose value in `run` (this run's
// to_json()) differs from the one in `saved` (the "run" of the snapshot `path`'s manifest);
// nothing to compare for a snapshot that recorded no settings.
void check_resume_settings(const nlohmann::json& saved, const nlohmann::json& run,
                           const std::string& path);

// Declares every option's flag on `app`. The flags that shape the pipeline (K, balance, M,
// schedule, v, checkpoint, devices, threads) form the group kPipelineGroup and --plan and
// --memory-per-device kPlanningGroup: what a plan sets, so what gpipe_plan leaves out of the
// commands it prints.
void add_train_flags(CLI::App& app, TrainOptions& options);
inline constexpr const char* kPipelineGroup = "Pipeline";
// What the flags' own checks cannot see: the values that must agree with each other (--chunks
// within --batch-size, --resume with a --snapshot-dir, ...). Throws ConfigError naming them;
// gpipe_train and gpipe_plan call it before any work.
void check_train_options(const TrainOptions& options);
inline constexpr const char* kPlanningGroup = "Planning";

// Directory of the presets (experiments/presets in the source tree).
std::string presets_dir();
// Turns "--preset NAME" into "--config <presets_dir>/NAME.toml" so CLI11 reads it; returns the
// rewritten argument list. Throws ConfigError when the preset does not exist, listing those
// that do.
std::vector<std::string> expand_preset(int argc, char** argv);
// cli::run_main over the arguments with --preset expanded: what gpipe_train and gpipe_plan run.
// An unknown preset exits 2 naming the presets that exist.
int run_with_presets(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

}  // namespace gpipe::train
