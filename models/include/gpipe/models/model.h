// ModelBuilder: a model as a sequence of layers that can be built one at a time.
//
// Why this file exists: the trainer, the scaling and max-model-size drivers and the
// multi-process engine all need a model as the flat layer list the pipeline takes, but not
// always all of it: a rank of a multi-process pipeline builds only its own stage, and counting
// the parameters of a 5-billion-parameter Transformer must not need the memory to hold it. A
// builder therefore knows how many layers the model has and builds any one of them on demand.
// Layer i is initialised from (init seed, i) alone, so building a range gives exactly the weights
// that building the whole model would.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpipe/layer.h"
#include "gpipe/loss.h"

namespace gpipe::models {

// A synthetic mini-batch: what the first layer takes, and what the loss compares the last
// layer's output with.
struct SampleBatch {
  torch::Tensor input;   // images (N, C, H, W), tokens (N, T) int64, or features (N, F)
  torch::Tensor target;  // labels (N) int64, or next tokens (N, T) int64
};

class ModelBuilder {
 public:
  virtual ~ModelBuilder() = default;

  // The registry name: "amoebanet-d", "transformer-l", "mlp", ...
  virtual std::string name() const = 0;
  virtual int64_t num_layers() const = 0;
  // Name of layer i ("stem", "cell_3", "reduction_1", "head", ...), without building it.
  virtual std::string layer_name(int64_t i) const = 0;

  // Builds layer i, initialised from (init_seed, i) alone: the same weights whatever else was
  // built before, in whatever order, on whatever thread. Holds a process-wide mutex while it
  // reseeds torch's default CPU generator, and restores that generator's state afterwards, so
  // building a model does not disturb the caller's random stream. Throws ConfigError for i out
  // of range.
  LayerPtr build_layer(int64_t i) const;
  // Every layer, in order.
  LayerList build() const { return build_range(0, num_layers()); }
  // Layers [begin, end), exactly as build() would make them.
  LayerList build_range(int64_t begin, int64_t end) const;

  // Parameters of layer i / of each layer / of the whole model. The default builds each layer,
  // counts and drops it, so memory stays at one layer; models whose layers are too big to build
  // quickly override count_layer_parameters analytically (tested equal to the built count).
  virtual int64_t count_layer_parameters(int64_t i) const;
  std::vector<int64_t> layer_parameters() const;
  int64_t count_parameters() const;
  // Whether count_layer_parameters is a formula (instant) rather than a build (seconds per
  // billion parameters).
  virtual bool counts_analytically() const { return false; }

  // A synthetic batch of `batch_size` samples for this model, drawn from a generator seeded with
  // `seed` (never from the default generator).
  virtual SampleBatch sample_batch(int64_t batch_size, uint64_t seed) const = 0;
  // One sample's input shape, without the batch dimension and without allocating anything:
  // sample_batch's input is `batch_size` of these. What a run can hold is checked from it.
  virtual std::vector<int64_t> sample_shape() const = 0;
  // The loss that fits the last layer's output and sample_batch's target. Every model here ends
  // in logits, (N, classes) or (N, T, vocab), so this is cross-entropy unless overridden.
  virtual LossFn loss() const { return cross_entropy_loss(); }

  uint64_t init_seed() const { return init_seed_; }

 protected:
  explicit ModelBuilder(uint64_t init_seed) : init_seed_(init_seed) {}
  // Constructs layer i; called by build_layer with the default generator already seeded.
  virtual LayerPtr make_layer(int64_t i) const = 0;
  // Throws ConfigError unless 0 <= i < num_layers().
  void check_layer_index(int64_t i) const;

 private:
  uint64_t init_seed_;
};

}  // namespace gpipe::models
