// Saving and loading a pipeline's state by name, whatever its balance.
//
// Why this file exists: a snapshot saved with K stages must load with any other K (and in a
// multi-process run, each process holds one stage). So nothing here is keyed by stage or by a
// parameter's position in an optimizer: every parameter, buffer and piece of optimizer state is
// stored under the global name "<layer index>.<name>" (Pipeline::named_parameters), one shard
// file per stage, and loading picks whatever names the local stages own from every shard.
// Optimizer state is understood for SGD, RMSprop, Adam and AdamW.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "gpipe/pipeline.h"

namespace gpipe {

// Each shard's checksum (files.h), by file name ("stage-0.pt").
using ShardChecksums = std::map<std::string, std::string>;

// Writes each local stage of `pipeline` to `dir/stage-<s>.pt` (the folder must exist): its
// parameters, buffers, and, when the stage has an optimizer, that optimizer's per-parameter
// state. Each file is written to a temporary name and renamed. Returns each file's checksum
// (files.h) by file name, for the snapshot's manifest.
ShardChecksums save_stage_shards(Pipeline& pipeline, const std::string& dir);

struct LoadOptions {
  // Restore optimizer state too (false for fine-tuning).
  TORCH_ARG(bool, optimizer) = true;
  // Skip parameters whose saved shape differs (a classifier for another number of classes)
  // instead of failing.
  TORCH_ARG(bool, skip_mismatched_shapes) = false;
  // Global layer indices whose parameters and buffers stay as initialised whatever the snapshot
  // holds (fine-tuning's new, randomly initialised classifier head).
  TORCH_ARG(std::vector<int64_t>, fresh_layers) = {};
  // The checksum of every shard by file name, as save_stage_shards returned them: a shard that
  // differs, is missing, or is not listed is refused. Empty: no check (an older snapshot).
  TORCH_ARG(ShardChecksums, checksums) = {};
};

struct LoadReport {
  int64_t loaded = 0;                // tensors restored
  std::vector<std::string> skipped;  // left as initialised (shape mismatch or fresh layer)
};

// Reads every `stage-*.pt` in `dir` and restores the local stages' tensors by name. Throws
// InputError naming the file for a corrupt shard or one that fails its checksum, naming the
// tensor for NaN or infinite weights, and ConfigError naming the parameter when the snapshot
// lacks one of ours or holds it with another shape (another model).
LoadReport load_stage_shards(Pipeline& pipeline, const std::string& dir,
                             const LoadOptions& options = {});

// The name of the optimizer kind ("sgd", "rmsprop", "adam", "adamw"), or "unknown".
std::string optimizer_kind(torch::optim::Optimizer& optimizer);

}  // namespace gpipe
