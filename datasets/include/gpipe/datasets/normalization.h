// Per-dataset pixel mean and standard deviation.
//
// Why this file exists: every transform normalises with the statistics of its dataset's
// training images, and the trainer prints the ones it used. They are the per-channel mean and
// (population) standard deviation of the raw training pixels scaled to [0, 1], in RGB order;
// `dataset_info` measures them from the files, so each figure here can be checked.
#pragma once

#include <string>
#include <vector>

namespace gpipe::datasets {

struct Normalization {
  std::vector<double> mean;  // one per channel
  std::vector<double> std;   // one per channel
};

// ILSVRC-2012 train (the figures torchvision and the reference implementations use).
extern const Normalization kImageNetNormalization;
// CIFAR-10 train, 50000 images.
extern const Normalization kCifar10Normalization;
// CIFAR-100 train, 50000 images.
extern const Normalization kCifar100Normalization;
// Fashion-MNIST train, 60000 images.
extern const Normalization kFashionMnistNormalization;
// MNIST train, 60000 images.
extern const Normalization kMnistNormalization;
// Synthetic images (synthetic.h): exact figures of a class colour uniform in 64..191 plus noise
// uniform in -64..63, per channel (normalization_for repeats them `channels` times).
extern const Normalization kSyntheticNormalization;

// The statistics of a dataset by name (imagenet, cifar10, cifar100, fashion-mnist, mnist,
// synthetic), with `channels` entries for synthetic. Throws ConfigError for an unknown name.
Normalization normalization_for(const std::string& dataset, int64_t channels = 3);

}  // namespace gpipe::datasets
