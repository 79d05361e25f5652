// The trainer: a model, its pipeline, data, an optimiser, evaluation and snapshots.
//
// Why this file exists: it is the one training loop behind gpipe_train,
// experiments/run_amoebanet.sh and the accuracy table, so every figure they print comes from the
// same code path. It builds the model (in a distributed run: this process's stage only),
// resolves the balance, runs steps with the learning-rate schedule, evaluates the test split
// through the pipeline, saves and resumes snapshots, and reports losses, accuracy,
// throughput, the measured bubble and the memory meter's peaks.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <vector>

#include "gpipe/distributed.h"
#include "gpipe/models/model.h"
#include "gpipe/pipeline.h"
#include "train/snapshot_manager.h"
#include "train/train_options.h"
#include "train/training_data.h"

namespace gpipe::train {

struct Evaluation {
  int64_t epoch = 0;
  int64_t step = 0;
  double top1 = 0;
  double top5 = 0;
  int64_t examples = 0;
};

struct TrainResult {
  std::vector<double> losses;        // every step of the run, those before a resume included
  std::vector<double> step_seconds;  // the steps this process ran
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;                             // measured, last step
  std::vector<int64_t> peak_memory_bytes_per_device;      // max over the steps run
  std::vector<int64_t> peak_activation_bytes_per_device;  // max over the steps after the first
  std::vector<int64_t> balance;
  int64_t parameters = 0;
  double param_checksum = 0;
  std::vector<Evaluation> evaluations;
  std::optional<Evaluation> final_evaluation;
  int64_t steps = 0;
  double train_seconds = 0;
  std::string last_snapshot;
  // Per step run, as this process saw it: examples its loader decoded (N/R with R replicas of a
  // real dataset), and with replicas the gradient all-reduce's time on the communication thread
  // and the part of it the step waited for (grad_reducer.h).
  std::vector<int64_t> examples_loaded_per_rank;
  std::vector<double> grad_reduce_ms;
  std::vector<double> grad_reduce_exposed_ms;
  // Bytes this process sent between devices in the last step (activations and gradients), and
  // the steps a loss scaler skipped for an overflow.
  int64_t sent_bytes_per_step = 0;
  int64_t skipped_steps = 0;

  // Records the step just run (after step_seconds): its memory peaks, examples loaded and,
  // with replicas, the gradient all-reduce's figures.
  void record_step(const StepStats& last, int64_t examples_loaded, bool replicated);
  nlohmann::json to_json() const;
};

// Thrown when the loss stops being finite; the run ends with the last good snapshot kept.
class TrainingStopped : public Error {
 public:
  using Error::Error;
};

// A model on CPU devices whose parameters and their gradients alone, or whose one mini-batch of
// inputs, outgrow this machine's memory (or its address-space limit) is refused before anything
// is built or allocated: it would otherwise grow until the kernel kills it, or end in an
// allocator's error. gpipe_train and gpipe_plan call it before any work.
void check_fits_host(const models::ModelBuilder& builder, const TrainOptions& options);

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  ~Trainer();

  TrainResult run();
  // In a distributed run: tells the other processes why this one is stopping (through the
  // store), and on rank 0 waits for them to read it. No-op in-process.
  void abort_peers(const std::string& why);

  Pipeline& pipeline() { return *pipeline_; }
  const TrainOptions& options() const { return options_; }
  // Whether this process reports (logs progress, writes outputs): always in-process; global
  // rank 0 in a distributed run.
  bool reports() const { return world_->rank() == 0; }

 private:
  // --plan auto: the planner's best plan for --memory-per-device sets the pipeline flags.
  void choose_plan();
  void resolve_balance();
  // The exact partition of the layers into S stages by --balance-by.
  std::vector<int64_t> balance_stages(int64_t S);
  void restore();
  // Creates --output-dir and names the outputs it holds; checks every output path.
  void resolve_outputs();
  // Takes --output-dir for this run (its run id in kOwnerFile): refuses a folder holding another
  // run's results unless --overwrite-results (which deletes them); a resume of the run whose
  // results it holds appends to them.
  void claim_output_dir();
  // Distributed: joins the world, shards the data and builds this rank's stage.
  void join_world(PipelineOptions pipe_options, const LossFn& loss);
  struct RunLog;
  // One training step on this replica's batch at `lr`, recorded; returns its seconds.
  double train_step(const models::SampleBatch& mine, double lr, TrainResult& result, RunLog& log);
  void save_snapshot(TrainResult& result, RunLog& log);
  void record_evaluation(const Evaluation& e, TrainResult& result, RunLog& log);
  // Distributed: every stage's peaks, measured by its own process, into `result`.
  void gather_stage_peaks(TrainResult& result);
  std::optional<Evaluation> evaluate(int64_t epoch, int64_t step);
  // This replica's rows of a global mini-batch.
  models::SampleBatch shard(models::SampleBatch batch) const;
  int64_t total_steps() const;

  // As given, then with its shape resolved (resolve_balance): K, the balance per device and,
  // when v > 1, per virtual stage. The one shape the run trains.
  TrainOptions options_;
  std::unique_ptr<TrainingData> data_;
  std::unique_ptr<models::ModelBuilder> builder_;
  std::unique_ptr<distributed::Context> context_;  // distributed runs only
  World* world_ = &single_process_world();         // context_, or the world of one process
  LayerList layers_;  // every layer in-process; this stage's layers in a distributed run
  int64_t total_layers_ = 0;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<SnapshotManager> snapshots_;
  RunPosition position_;
  std::string run_id_;  // the snapshots' run id, or drawn for a run without snapshots
};

}  // namespace gpipe::train
