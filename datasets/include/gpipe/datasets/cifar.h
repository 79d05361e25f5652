// CIFAR-10 and CIFAR-100 in their binary formats.
//
// Why this file exists: the paper's transfer-learning results (Table 4) are on CIFAR. The
// binary versions are read as published: CIFAR-10 has data_batch_1..5.bin and test_batch.bin
// of 3073-byte records (label, then 1024 red, 1024 green, 1024 blue bytes of a 32x32 image);
// CIFAR-100 has train.bin and test.bin of 3074-byte records (coarse label, fine label, pixels),
// of which the fine label (100 classes) is used. The split is held in memory (150 MB for 50000
// images). A file that is not a whole number of records, or a label out of range, fails with
// the file and byte offset named.
#pragma once

#include <string>
#include <vector>

#include "gpipe/datasets/source.h"
#include "gpipe/datasets/split.h"

namespace gpipe::datasets {

class CifarSource : public ImageSource {
 public:
  // `num_classes` is 10 or 100. The files are looked for in `dir`, then in the folder the
  // official archive extracts to (cifar-10-batches-bin, cifar-100-binary). Class names come
  // from batches.meta.txt / fine_label_names.txt when present, else the published lists.
  CifarSource(const std::string& dir, Split split, int64_t num_classes);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t label(int64_t index) const override { return labels_[index]; }
  HwcImage image(int64_t index) const override;
  const std::vector<std::string>& classes() const override { return classes_; }
  int64_t channels() const override { return 3; }
  std::string describe(int64_t index) const override;

  // The files read, in order.
  const std::vector<std::string>& files() const { return files_; }

  static constexpr int64_t kSide = 32;
  static constexpr int64_t kImageBytes = 3 * kSide * kSide;

 private:
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> file_starts_;  // index of each file's first record
  std::vector<uint8_t> pixels_;       // planar RGB, kImageBytes per image
  std::vector<int64_t> labels_;
};

}  // namespace gpipe::datasets
