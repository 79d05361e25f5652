// AmoebaNetBuilder: the (L, D) plan of stem, cells and head, and the stem and head layers.
#include "gpipe/models/amoebanet.h"

#include <ATen/CPUGeneratorImpl.h>

#include "gpipe/batchnorm.h"
#include "gpipe/dropout.h"
#include "gpipe/errors.h"
#include "gpipe/linear.h"

namespace gpipe::models {
namespace {

// 3x3 convolution (stride 2, or 1 for small images) and BatchNorm:
// (N, channels, H, W) -> (N, stem_filters, H/stride, W/stride).
class AmoebaStem : public Layer {
 public:
  AmoebaStem(int64_t channels, int64_t filters, int64_t stride)
      : Layer("stem"), channels_(channels) {
    conv_ = register_module("conv", ConvBn(ConvBnOptions(channels, filters, 3).stride(stride)));
  }
  Activations forward(const Activations& inputs) override {
    GPIPE_CHECK(inputs.size() == 1 && inputs[0].dim() == 4 && inputs[0].size(1) == channels_,
                ConfigError, "the AmoebaNet stem takes one image batch (N, ", channels_,
                ", H, W), got ", inputs.size(), " tensors, the first of sizes ",
                inputs.empty() ? at::IntArrayRef{} : inputs[0].sizes());
    return {conv_(inputs[0])};
  }

 private:
  int64_t channels_;
  ConvBn conv_{nullptr};
};

// ReLU, global average pooling, dropout, linear classifier: {x} -> {logits (N, classes)}.
class AmoebaHead : public Layer {
 public:
  AmoebaHead(int64_t channels, int64_t classes, double dropout) : Layer("head") {
    dropout_ = register_module("dropout", Dropout(dropout));
    classifier_ = register_module("classifier", Linear(channels, classes));
  }
  Activations forward(const Activations& inputs) override {
    GPIPE_CHECK(inputs.size() == 1 && inputs[0].dim() == 4, ConfigError,
                "the AmoebaNet head takes {x (N, C, H, W)}, got ", inputs.size(), " tensors");
    auto x = torch::relu(inputs[0]).mean({2, 3});
    return {classifier_(dropout_(x))};
  }

 private:
  Dropout dropout_{nullptr};
  Linear classifier_{nullptr};
};

int64_t halve(int64_t size) {
  return (size + 1) / 2;
}

}  // namespace

void validate(const AmoebaNetOptions& o) {
  GPIPE_CHECK(o.layers() >= 1, ConfigError,
              "AmoebaNet needs at least one normal cell, got layers (L) = ", o.layers());
  GPIPE_CHECK(o.filters() > 0 && o.filters() % kAmoebaNetFilterMultiple == 0, ConfigError,
              "AmoebaNet filters (D) must be a positive multiple of ", kAmoebaNetFilterMultiple,
              " (the first stem cell has D/4 filters and its 3x3 and 1x7-7x1 operations "
              "bottleneck to a quarter of those), got ",
              o.filters());
  GPIPE_CHECK(o.classes() >= 1, ConfigError, "AmoebaNet needs at least one class, got ",
              o.classes());
  GPIPE_CHECK(o.channels() >= 1, ConfigError, "AmoebaNet needs at least one input channel, got ",
              o.channels());
  GPIPE_CHECK(o.stem_filters() >= 1, ConfigError, "AmoebaNet stem filters must be positive, got ",
              o.stem_filters());
  GPIPE_CHECK(o.stem_stride() == 1 || o.stem_stride() == 2, ConfigError,
              "AmoebaNet stem stride must be 1 or 2, got ", o.stem_stride());
  const int64_t min_size =
      o.stem_stride() == 2 ? kAmoebaNetMinImageSize : (kAmoebaNetMinImageSize + 1) / 2;
  GPIPE_CHECK(o.image_size() >= min_size, ConfigError, "AmoebaNet image size ", o.image_size(),
              " is too small for its reductions: the image is halved ",
              o.stem_stride() == 2 ? "five" : "four",
              " times and each halving needs at least a 2x2 map, so the size must be at least ",
              min_size, " (resize or pad smaller images)");
  GPIPE_CHECK(o.dropout() >= 0 && o.dropout() < 1, ConfigError, "dropout must be in [0, 1), got ",
              o.dropout());
  GPIPE_CHECK(o.drop_path() >= 0 && o.drop_path() < 1, ConfigError,
              "drop-path must be in [0, 1), got ", o.drop_path());
  validate_cell(o.genotype().normal, /*reduction=*/false, o.genotype().name + " normal cell");
  validate_cell(o.genotype().reduction, /*reduction=*/true, o.genotype().name + " reduction cell");
}

AmoebaNetBuilder::AmoebaNetBuilder(AmoebaNetOptions options, uint64_t init_seed)
    : ModelBuilder(init_seed), options_(std::move(options)) {
  validate(options_);
  const auto& o = options_;
  // The running state of the plan: x (the last output) and skip (the one before), with their
  // channels and spatial sides.
  int64_t x_channels = o.stem_filters();
  int64_t x_size = o.stem_stride() == 2 ? halve(o.image_size()) : o.image_size();
  int64_t skip_channels = x_channels;
  int64_t skip_size = x_size;
  plan_.push_back({LayerPlan::Kind::kStem, "stem", std::nullopt, x_channels, x_size});

  auto add_cell = [&](std::string name, bool reduction, int64_t filters) {
    const auto& genotype = reduction ? o.genotype().reduction : o.genotype().normal;
    auto cell = AmoebaCellOptions(genotype, reduction, x_channels, skip_channels, filters)
                    .skip_reduced(skip_size != x_size)
                    .drop_path(o.drop_path());
    const int64_t out_size = reduction ? halve(x_size) : x_size;
    plan_.push_back({LayerPlan::Kind::kCell, std::move(name), cell, cell.out_channels(), out_size});
    skip_channels = x_channels;
    skip_size = x_size;
    x_channels = cell.out_channels();
    x_size = out_size;
  };

  add_cell("stem_cell_0", true, o.filters() / 4);
  add_cell("stem_cell_1", true, o.filters() / 2);
  int64_t filters = o.filters();
  int reductions = 0;
  for (int64_t n = 0; n < o.layers(); ++n) {
    // Reduction k (k = 1, 2) goes before normal cell floor(k L / 3), as the reference places it.
    while (reductions < 2 && n == (reductions + 1) * o.layers() / 3) {
      filters *= 2;
      add_cell("reduction_" + std::to_string(reductions), true, filters);
      ++reductions;
    }
    add_cell("cell_" + std::to_string(n), false, filters);
  }
  plan_.back().cell->emit_skip(false);  // the head reads only the last cell's output
  plan_.push_back({LayerPlan::Kind::kHead, "head", std::nullopt, o.classes(), 1});
  if (o.filters() > 3 * kAmoebaNetFilterMultiple) {
    for (int64_t k = 1; k <= 3; ++k) {
      auto small = o;
      small.filters(k * kAmoebaNetFilterMultiple);
      probes_.push_back(std::make_shared<const AmoebaNetBuilder>(small, init_seed));
    }
  }
}

int64_t AmoebaNetBuilder::count_layer_parameters(int64_t i) const {
  check_layer_index(i);
  // The count is quadratic in D while a cell's structure stays that of the probes; a skip whose
  // channels happen to equal the cell's (the stem's fixed filters against D/4) needs no adapter,
  // and only such a small D does that: it is built.
  const auto has_skip_adapter = [i](const AmoebaNetBuilder& builder) {
    const auto& cell = builder.plan_[static_cast<size_t>(i)].cell;
    return cell && (cell->skip_reduced() || cell->skip_channels() != cell->channels());
  };
  if (probes_.empty() || has_skip_adapter(*this) != has_skip_adapter(*probes_[0]))
    return ModelBuilder::count_layer_parameters(i);
  int64_t p[3];
  for (size_t k = 0; k < 3; ++k)
    p[k] = probes_[k]->ModelBuilder::count_layer_parameters(i);
  // Newton's form through x = 1, 2, 3, at x = D / 16 (an integer: D is a multiple of 16, and
  // (x - 1)(x - 2) is even).
  const int64_t x = options_.filters() / kAmoebaNetFilterMultiple;
  return p[0] + (x - 1) * (p[1] - p[0]) + (x - 1) * (x - 2) / 2 * (p[2] - 2 * p[1] + p[0]);
}

std::string AmoebaNetBuilder::layer_name(int64_t i) const {
  check_layer_index(i);
  return plan_[static_cast<size_t>(i)].name;
}

LayerPtr AmoebaNetBuilder::make_layer(int64_t i) const {
  const auto& entry = plan_[static_cast<size_t>(i)];
  switch (entry.kind) {
    case LayerPlan::Kind::kStem:
      return std::make_shared<AmoebaStem>(options_.channels(), options_.stem_filters(),
                                          options_.stem_stride());
    case LayerPlan::Kind::kCell:
      return std::make_shared<AmoebaCell>(entry.name, *entry.cell);
    case LayerPlan::Kind::kHead:
      break;
  }
  const auto& last_cell = plan_[plan_.size() - 2];
  return std::make_shared<AmoebaHead>(last_cell.out_channels, options_.classes(),
                                      options_.dropout());
}

SampleBatch AmoebaNetBuilder::sample_batch(int64_t batch_size, uint64_t seed) const {
  GPIPE_CHECK(batch_size >= 1, ConfigError, "a sample batch needs at least one sample, got ",
              batch_size);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t s = options_.image_size();
  SampleBatch batch;
  batch.input = torch::randn({batch_size, options_.channels(), s, s}, generator);
  batch.target = torch::randint(0, options_.classes(), {batch_size}, generator,
                                torch::TensorOptions(torch::kLong));
  return batch;
}

}  // namespace gpipe::models
