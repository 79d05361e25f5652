// MNIST and Fashion-MNIST from their IDX files.
//
// Why this file exists: Fashion-MNIST is the real data this machine has (Debian's
// dataset-fashion-mnist installs it under /usr/share/datasets/fashion-mnist) and the default
// data of experiments/run_amoebanet.sh. Both datasets are 28x28 grayscale images with ten
// classes; the whole split is held in memory (47 MB for the 60000 training images).
#pragma once

#include <string>
#include <vector>

#include "gpipe/datasets/source.h"
#include "gpipe/datasets/split.h"

namespace gpipe::datasets {

// Where Debian's dataset-fashion-mnist package installs the data.
constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

class MnistSource : public ImageSource {
 public:
  // Reads <dir>/train-images-idx3-ubyte and train-labels-idx1-ubyte (test: t10k-...), each
  // plain or with .gz (the names with '.' before idx, as some mirrors use, are accepted too).
  // `classes` names the labels; every label must be below classes.size(). Throws DataError
  // naming the file: missing folder or file, bad IDX, image and label counts that differ, a
  // label out of range (with its byte offset).
  MnistSource(const std::string& dir, Split split, std::vector<std::string> classes);

  int64_t size() const override { return count_; }
  int64_t label(int64_t index) const override { return labels_[index]; }
  HwcImage image(int64_t index) const override;
  const std::vector<std::string>& classes() const override { return classes_; }
  int64_t channels() const override { return 1; }
  std::string describe(int64_t index) const override;

  const std::string& images_path() const { return images_path_; }
  const std::string& labels_path() const { return labels_path_; }

  static std::vector<std::string> fashion_mnist_classes();
  static std::vector<std::string> mnist_classes();

 private:
  std::vector<std::string> classes_;
  std::string images_path_;
  std::string labels_path_;
  int64_t count_ = 0;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<uint8_t> pixels_;
  std::vector<int64_t> labels_;
};

}  // namespace gpipe::datasets
