// An AmoebaNet cell as one pipeline layer.
//
// Why this file exists: AmoebaNet is a stack of cells, and each cell reads the outputs of the
// two cells before it. As a pipeline layer a cell therefore takes Activations {x, skip} (the
// previous cell's output and the one before; just {x} for the first cell, which is then its own
// skip) and returns {output, x}, so any cell boundary can be a stage boundary and carries
// exactly what the next cell needs (the last cell returns just {output}).
//
// Inside (as the TensorFlow reference's BaseCell): state 0 is ReLU-1x1 conv-BN(x) to `channels`
// filters; state 1 is the skip, brought to `channels` filters and to x's resolution
// (factorized reduction if it has twice x's resolution, ReLU-1x1 conv-BN if only its channel
// count differs, itself otherwise); then the genotype's five pairs, each operation followed by
// drop-path (except "none"), and the concatenation of the genotype's output states.
#pragma once

#include <array>

#include "gpipe/layer.h"
#include "gpipe/models/amoebanet_genotype.h"
#include "gpipe/models/amoebanet_ops.h"

namespace gpipe::models {

struct AmoebaCellOptions {
  AmoebaCellOptions(CellGenotype genotype, bool reduction, int64_t in_channels,
                    int64_t skip_channels, int64_t channels)
      : genotype_(std::move(genotype)),
        reduction_(reduction),
        in_channels_(in_channels),
        skip_channels_(skip_channels),
        channels_(channels) {}
  // Channels of the output: concat.size() states of `channels` each.
  int64_t out_channels() const { return static_cast<int64_t>(genotype_.concat.size()) * channels_; }
  TORCH_ARG(CellGenotype, genotype);
  // Operations on states 0 and 1 stride by 2: the output has half the input's resolution.
  TORCH_ARG(bool, reduction);
  // Channels of x (the previous cell's output) and of the skip (the cell before that).
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, skip_channels);
  // Filters of every operation; the output has concat.size() times as many channels.
  TORCH_ARG(int64_t, channels);
  // The skip has twice x's resolution (the previous cell was a reduction cell).
  TORCH_ARG(bool, skip_reduced) = false;
  // Drop-path probability of every operation but "none".
  TORCH_ARG(double, drop_path) = 0.0;
  // Return {output, x}; the last cell, whose successor (the head) needs no skip, returns
  // {output} and spares the stage boundary a tensor.
  TORCH_ARG(bool, emit_skip) = true;
};

class AmoebaCell : public Layer {
 public:
  AmoebaCell(std::string name, AmoebaCellOptions options);
  // {x} or {x, skip} -> {output, x} (or {output} without emit_skip).
  Activations forward(const Activations& inputs) override;
  const AmoebaCellOptions& options() const { return options_; }

 private:
  AmoebaCellOptions options_;
  ConvBn preprocess_{nullptr};
  torch::nn::AnyModule skip_adapter_;  // empty when the skip already fits
  std::vector<CellOperation> operations_;
};

}  // namespace gpipe::models
