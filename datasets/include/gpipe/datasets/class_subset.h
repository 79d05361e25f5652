// ClassSubset: the images of some classes of a source, relabelled 0..n-1.
//
//   auto first_half = std::make_shared<ClassSubset>(fashion_mnist, parse_class_list("0-4"));
//   first_half->label(i);   // in [0, 5): position of the original label in {0, 1, 2, 3, 4}
//
// Why this file exists: a transfer experiment needs two disjoint tasks from the one dataset this
// machine has (pretrain on Fashion-MNIST's classes 0-4, fine-tune on 5-9). Filtering the raw
// source keeps the transforms, the loader's determinism and the trainer unchanged: the model
// sees an ordinary 5-class dataset. The order of the kept images is the source's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpipe/datasets/source.h"

namespace gpipe::datasets {

// "0-4", "5,7,9" or "0-2,8": class indices in the order given, each at most once. Throws
// ConfigError naming the text for anything else (an empty list, a reversed range, a repeat).
std::vector<int64_t> parse_class_list(const std::string& text);

class ClassSubset : public ImageSource {
 public:
  // Keeps the images of `classes` (indices into source->classes()); image labels become the
  // class's position in `classes`. Throws ConfigError for a class the source does not have and
  // DataError when no image is left.
  ClassSubset(std::shared_ptr<const ImageSource> source, std::vector<int64_t> classes);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  int64_t label(int64_t index) const override { return labels_[index]; }
  HwcImage image(int64_t index) const override { return source_->image(indices_[index]); }
  const std::vector<std::string>& classes() const override { return names_; }
  int64_t channels() const override { return source_->channels(); }
  std::string describe(int64_t index) const override { return source_->describe(indices_[index]); }

 private:
  std::shared_ptr<const ImageSource> source_;
  std::vector<int64_t> indices_;  // kept images, in the source's order
  std::vector<int64_t> labels_;   // their new labels
  std::vector<std::string> names_;
};

}  // namespace gpipe::datasets
