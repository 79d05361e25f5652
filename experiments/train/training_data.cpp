#include "train/training_data.h"

#include <spdlog/spdlog.h>

#include "gpipe/errors.h"
#include "gpipe/layer.h"

namespace gpipe::train {
namespace {

constexpr int64_t kSyntheticEpochSteps = 100;

constexpr const char* kTokens = "synthetic-tokens";

// A model knob's value, or `fallback` for a model without that knob: the data takes the model's
// image size, sequence length and vocabulary where it has them.
int64_t knob_or(const models::ModelConfig& model, const char* knob, int64_t fallback) {
  return models::has_knob(model, knob) ? models::int_knob(model, knob) : fallback;
}

// What a model without input channels takes, for messages.
std::string input_of(const models::ModelConfig& model) {
  if (models::has_knob(model, "in_features"))
    return c10::str("vectors of --in-features ", models::int_knob(model, "in_features"));
  if (models::has_knob(model, "seq_len"))
    return c10::str("token sequences of --seq-len ", models::int_knob(model, "seq_len"));
  return models::has_knob(model, "channels")
             ? c10::str("images of ", models::int_knob(model, "channels"), " channel(s)")
             : std::string("inputs of its own");
}

}  // namespace

TrainingData::TrainingData(const TrainOptions& options) : options_(options) {
  if (options_.dataset == "synthetic") {
    GPIPE_CHECK(options_.class_subset.empty(), ConfigError, "--class-subset ",
                options_.class_subset, " needs a real dataset; --dataset synthetic has none");
    return;
  }
  GPIPE_CHECK(options_.workers >= 0, ConfigError, "--workers must be >= 0, got ", options_.workers);
  GPIPE_CHECK(options_.dataset != kTokens || models::has_knob(options_.model, "seq_len"),
              ConfigError, "--dataset ", kTokens, " gives token sequences, but --model ",
              options_.model.name(), " takes ", input_of(options_.model),
              "; train --model transformer-l on it, or use --dataset synthetic");
  const auto classes = options_.class_subset.empty()
                           ? std::vector<int64_t>{}
                           : datasets::parse_class_list(options_.class_subset);
  const datasets::DatasetOptions defaults("");
  auto make = [&](datasets::Split split, bool augment) {
    return datasets::make_dataset(
        datasets::DatasetOptions(options_.dataset)
            .data_dir(options_.data_dir)
            .split(split)
            .image_size(knob_or(options_.model, "image_size", defaults.image_size()))
            .seq_len(knob_or(options_.model, "seq_len", defaults.seq_len()))
            .vocab(knob_or(options_.model, "vocab", defaults.vocab()))
            .augment(augment)
            .cutout(augment ? options_.cutout : 0)
            .class_subset(classes)
            .skip_bad(options_.skip_bad)
            .seed(options_.seed));
  };
  train_set_ = make(datasets::Split::kTrain, options_.augment);
  shard(0, 1, 1);
  GPIPE_CHECK(train_->batches_per_epoch() >= 1, ConfigError, "the training split of ",
              options_.dataset, " has ", train_set_->size(),
              " examples, fewer than one --batch-size of ", options_.batch_size);
  test_set_ = make(datasets::Split::kTest, false);
  const int64_t eval_batch =
      options_.eval_batch_size > 0 ? options_.eval_batch_size : options_.batch_size;
  test_ = std::make_unique<datasets::Loader>(
      test_set_, datasets::LoaderOptions(eval_batch).workers(options_.workers).seed(options_.seed));
}

TrainingData::~TrainingData() = default;

void TrainingData::apply_to(models::ModelConfig& model) const {
  // The token data was made to the model's sequence length and vocabulary (checked when made).
  if (synthetic() || options_.dataset == kTokens) return;
  // Every other real dataset gives images; a model without input channels takes something else.
  if (!models::has_knob(model, "channels")) {
    throw ConfigError(c10::str("--model ", model.name(), " takes ", input_of(model),
                               ", but --dataset ", options_.dataset, " gives images of ",
                               train_set_->channels(),
                               " channel(s); train an image model on it (--model amoebanet-d "
                               "or amoebanet-b), or use --dataset synthetic"));
  }
  bool changed = false;
  for (const auto& [knob, value] :
       {std::pair<const char*, int64_t>{"channels", train_set_->channels()},
        {"classes", train_set_->num_classes()}}) {
    if (!models::has_knob(model, knob)) continue;
    changed |= models::int_knob(model, knob) != value;
    models::set_knob(model, knob, value);
  }
  if (changed) {
    spdlog::info("{} has {} channel(s) and {} classes: the model takes them", options_.dataset,
                 train_set_->channels(), train_set_->num_classes());
  }
}

int64_t TrainingData::steps_per_epoch() const {
  return synthetic() ? kSyntheticEpochSteps : train_->batches_per_epoch();
}

int64_t TrainingData::train_examples() const {
  return synthetic() ? kSyntheticEpochSteps * options_.batch_size
                     : static_cast<int64_t>(train_set_->size());
}

std::string TrainingData::describe() const {
  if (synthetic()) return "synthetic batches from the model";
  return c10::str(options_.dataset, ": ", train_set_->size(), " training and ",
                  test_set_ ? test_set_->size() : 0, " test examples, ", steps_per_epoch(),
                  " steps per epoch");
}

void TrainingData::shard(int64_t replica, int64_t replicas, int64_t microbatches) {
  replica_ = replica;
  replicas_ = replicas;
  microbatches_ = microbatches;
  if (train_set_ == nullptr) return;  // synthetic
  train_ =
      std::make_unique<datasets::Loader>(train_set_, datasets::LoaderOptions(options_.batch_size)
                                                         .workers(options_.workers)
                                                         .shuffle(true)
                                                         .drop_last(true)
                                                         .seed(options_.seed)
                                                         .shard(replica)
                                                         .shards(replicas)
                                                         .shard_microbatches(microbatches));
}

void TrainingData::begin_epoch(int64_t epoch, int64_t start_batch) {
  epoch_ = epoch;
  batch_ = start_batch;
  if (train_) train_->begin_epoch(epoch, start_batch);
}

std::optional<models::SampleBatch> TrainingData::next() {
  if (batch_ >= steps_per_epoch()) return std::nullopt;
  const int64_t index = batch_++;
  if (synthetic()) {
    GPIPE_CHECK(builder_ != nullptr, ConfigError, "synthetic data needs the model");
    // A pure function of (seed, epoch, batch).
    auto batch = builder_->sample_batch(options_.batch_size,
                                        mix_seed(options_.seed, epoch_, index, /*layer=*/-1));
    examples_loaded_ = batch.input.size(0);
    if (replicas_ == 1) return batch;
    const auto rows = torch::tensor(
        datasets::shard_positions(batch.input.size(0), replica_, replicas_, microbatches_));
    return models::SampleBatch{batch.input.index_select(0, rows),
                               batch.target.index_select(0, rows)};
  }
  auto batch = train_->next();
  if (!batch) return std::nullopt;
  examples_loaded_ = batch->input.size(0);
  return models::SampleBatch{batch->input, batch->target};
}

}  // namespace gpipe::train
