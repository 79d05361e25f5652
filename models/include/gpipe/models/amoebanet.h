// AmoebaNet-D and AmoebaNet-B as a flat list of pipeline layers.
//
// Why this file exists: these are the image models GPipe scales (Table 1: AmoebaNet-D (L, D) up
// to 1.8B parameters; Table 4: AmoebaNet-B (18, 512)). The builder turns the (L, D) knobs, the
// number of classes, the input size and channels into the layer list
//
//   stem, stem_cell_0, stem_cell_1, cell_0 .. cell_{L/3-1}, reduction_0, cell_{L/3} ..,
//   reduction_1, .. cell_{L-1}, head                                       (L + 6 layers)
//
// as the TensorFlow reference's ImageNet model: a 3x3 stride-2 convolution to `stem_filters`
// with BatchNorm; two reduction cells with D/4 and D/2 filters; L normal cells in three stacks
// with D, 2D and 4D filters, a reduction cell before the second and third stack (before normal
// cell floor(k L / 3), k = 1, 2); ReLU, global average pooling, dropout and a linear classifier.
// There is no auxiliary head. Every BatchNorm is the engine's DeferredBatchNorm; drop-path and
// dropout draw from the engine's deterministic generator.
//
// Sizes: the image is halved five times (stem convolution, two stem cells, two reduction cells),
// each halving rounding up, so the last map is ceil(image_size / 32) on a side (224 -> 7,
// 32 -> 1, 28 -> 1). Each halving needs at least a 2x2 map, so image_size must be at least 17;
// Fashion-MNIST's 28x28 works as is. With stem_stride 1 the stem keeps the input's size (four
// halvings: 28 -> 2; image_size at least 9). D must be a multiple of 16: the first stem cell has
// D/4 filters and its 3x3 and 1x7-7x1 operations bottleneck to a quarter of those.
//
// Where this differs from the reference: the stem convolution pads by one (as torchgpipe does;
// 224 -> 112 rather than the reference's 299 -> 149 without padding), and the first stem cell,
// which the reference feeds the stem output as both of its inputs, brings that skip input to
// D/4 channels with a 1x1 convolution once rather than inside each operation; neither changes
// the parameter count by more than a few thousand. Also: LibTorch's default initialisation
// rather than He-normal; a constant drop-path rate (the reference ramps it up over training);
// "dil_2_separable_5x5_2" is dilated as its name says (the reference parses it as an undilated
// 5x5, with the same parameters); BatchNorm epsilon 1e-3 as the reference but LibTorch's
// momentum 0.1 (the reference's decay 0.9997 would be momentum 0.0003); and for L = 1 both
// reductions precede the one normal cell (the reference then builds only one).
#pragma once

#include <optional>

#include "gpipe/models/amoebanet_cell.h"
#include "gpipe/models/amoebanet_genotype.h"
#include "gpipe/models/model.h"

namespace gpipe::models {

constexpr int64_t kAmoebaNetMinImageSize = 17;
constexpr int64_t kAmoebaNetFilterMultiple = 16;

struct AmoebaNetOptions {
  AmoebaNetOptions(int64_t layers, int64_t filters) : layers_(layers), filters_(filters) {}
  TORCH_ARG(Genotype, genotype) = amoebanet_d_genotype();
  // L: normal cells, in three stacks.
  TORCH_ARG(int64_t, layers);
  // D: filters of the first stack's cells.
  TORCH_ARG(int64_t, filters);
  TORCH_ARG(int64_t, classes) = 1000;
  // Square input images of image_size x image_size with `channels` channels.
  TORCH_ARG(int64_t, image_size) = 224;
  TORCH_ARG(int64_t, channels) = 3;
  TORCH_ARG(int64_t, stem_filters) = 32;
  // Stride of the stem convolution: 2 as the ImageNet reference; 1 keeps a small image's
  // resolution (28x28 Fashion-MNIST then reaches the normal cells at 7x7 rather than 1x1).
  TORCH_ARG(int64_t, stem_stride) = 2;
  // Dropout before the classifier (the reference trains with 0.5).
  TORCH_ARG(double, dropout) = 0.0;
  // Drop-path of every cell operation but "none" (the reference trains with 0.3).
  TORCH_ARG(double, drop_path) = 0.0;
};

// Throws ConfigError naming the value when a knob cannot work.
void validate(const AmoebaNetOptions& options);

class AmoebaNetBuilder : public ModelBuilder {
 public:
  // What each layer is, computed without building anything.
  struct LayerPlan {
    enum class Kind { kStem, kCell, kHead } kind = Kind::kStem;
    std::string name;
    std::optional<AmoebaCellOptions> cell;  // kCell only
    int64_t out_channels = 0;               // channels of the layer's first output
    int64_t out_size = 0;                   // its spatial side (1 for the head's logits)
  };

  // Layer i initialised from (init_seed, i), as every builder.
  explicit AmoebaNetBuilder(AmoebaNetOptions options, uint64_t init_seed = 0);

  std::string name() const override { return options_.genotype().name; }
  int64_t num_layers() const override { return static_cast<int64_t>(plan_.size()); }
  std::string layer_name(int64_t i) const override;
  // Images (N, channels, image_size, image_size) from N(0, 1) and labels in [0, classes).
  SampleBatch sample_batch(int64_t batch_size, uint64_t seed) const override;
  std::vector<int64_t> sample_shape() const override {
    return {options_.channels(), options_.image_size(), options_.image_size()};
  }
  // Exact, without building at D: each channel count of a layer is a multiple of D/16 plus a
  // constant (the stem's), so the layer's parameters are a quadratic in D, which three builds at
  // D = 16, 32 and 48 fix. Tests check it against layers built at larger D.
  int64_t count_layer_parameters(int64_t i) const override;
  bool counts_analytically() const override { return true; }

  const AmoebaNetOptions& options() const { return options_; }
  const std::vector<LayerPlan>& plan() const { return plan_; }

 protected:
  LayerPtr make_layer(int64_t i) const override;

 private:
  AmoebaNetOptions options_;
  std::vector<LayerPlan> plan_;
  // The same model at D = 16, 32, 48, whose built layers count_layer_parameters interpolates;
  // empty when D <= 48 (its layers are then built and counted).
  std::vector<std::shared_ptr<const AmoebaNetBuilder>> probes_;
};

}  // namespace gpipe::models
