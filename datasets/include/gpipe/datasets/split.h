// Train or test split.
//
// Why this file exists: every format names its two splits differently (train/t10k, data_batch/
// test_batch, train/val); the rest of the code speaks of train and test only.
#pragma once

#include <string>

namespace gpipe::datasets {

// kTest is ImageNet's val/ folder, CIFAR's test batch and MNIST's t10k files.
enum class Split { kTrain, kTest };

// "train" or "test".
std::string to_string(Split split);
// Parses "train" or "test" ("val" is accepted for test); throws ConfigError otherwise.
Split parse_split(const std::string& text);

}  // namespace gpipe::datasets
