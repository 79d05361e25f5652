// make_dataset: a dataset by name, with the transform that goes with it.
//
//   auto train = make_dataset(DatasetOptions("fashion-mnist").image_size(32).augment(true));
//   auto test = make_dataset(DatasetOptions("imagenet").data_dir("/data/imagenet")
//                                .split(Split::kTest).image_size(224));
//   auto tokens = make_dataset(DatasetOptions("synthetic-tokens").count(4096).seq_len(256)
//                                  .vocab(32000));
//
// Why this file exists: the trainer and the tools choose data from the command line; this is
// the one place that knows which file format, default folder, native size, augmentation and
// normalisation each dataset name stands for:
//   imagenet       random-resized crop + flip | shorter side to size/0.875, centre crop
//   cifar10/100    pad 4 and crop + flip      | resize
//   fashion-mnist  pad 2 and crop + flip      | resize      (1 channel; default folder: Debian's)
//   mnist          pad 2 and crop             | resize      (1 channel; no flip for digits)
//   synthetic      resize                     | resize
// The crop happens at native resolution, then the result is resized to image_size, so a
// 28x28 image can feed a model built for 32 or 224.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpipe/datasets/dataset.h"
#include "gpipe/datasets/source.h"
#include "gpipe/datasets/split.h"
#include "gpipe/datasets/transform.h"

namespace gpipe::datasets {

struct DatasetOptions {
  /* implicit */ DatasetOptions(std::string name) : name_(std::move(name)) {}
  // imagenet | cifar10 | cifar100 | fashion-mnist | mnist | synthetic | synthetic-tokens
  TORCH_ARG(std::string, name);
  // Folder of the files; empty means the default (Debian's folder for fashion-mnist; required
  // for the other real datasets).
  TORCH_ARG(std::string, data_dir) = "";
  TORCH_ARG(Split, split) = Split::kTrain;
  // Output height and width; 0 means the native size (224 for ImageNet, 32 for CIFAR and
  // synthetic, 28 for MNIST-like).
  TORCH_ARG(int64_t, image_size) = 0;
  // The training transform (random crop and flip) when true, the evaluation one otherwise.
  TORCH_ARG(bool, augment) = false;
  // With augment: cutout side in pixels of the output (transform.h; 0: off).
  TORCH_ARG(int64_t, cutout) = 0;
  // Only these classes, relabelled 0..n-1 in this order (class_subset.h); empty: every class.
  TORCH_ARG(std::vector<int64_t>, class_subset) = {};
  // Skip (log and count) undecodable images instead of failing; ImageNet folders only.
  TORCH_ARG(bool, skip_bad) = false;
  // ImageNet flat val/: the labels file (see image_folder.h); empty: look in the usual places.
  TORCH_ARG(std::string, labels_file) = "";
  // Synthetic data: number of examples, classes, channels, tokens per sequence, vocabulary.
  TORCH_ARG(int64_t, count) = 1024;
  TORCH_ARG(int64_t, classes) = 10;
  TORCH_ARG(int64_t, channels) = 3;
  TORCH_ARG(int64_t, seq_len) = 64;
  TORCH_ARG(int64_t, vocab) = 1000;
  // Synthetic data: seed of the contents (augmentation is seeded by the loader).
  TORCH_ARG(uint64_t, seed) = 0;
};

// The names make_dataset accepts.
const std::vector<std::string>& dataset_names();

// The dataset, ready for a Loader. Throws ConfigError for an unknown name or bad settings and
// DataError for missing or bad files.
std::shared_ptr<Dataset> make_dataset(const DatasetOptions& options);

// The raw images of an image dataset (every name but synthetic-tokens), before any transform.
std::shared_ptr<ImageSource> make_source(const DatasetOptions& options);

// The transform make_dataset uses for these options.
TransformOptions make_transform_options(const DatasetOptions& options);

// The folder make_dataset reads for these options (the default when data_dir is empty).
std::string resolve_data_dir(const DatasetOptions& options);

// The native image size of a dataset: 224, 32 or 28.
int64_t native_image_size(const std::string& name);

}  // namespace gpipe::datasets
