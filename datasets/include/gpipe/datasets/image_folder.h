// ImageNet in the ILSVRC-2012 folder layout.
//
// Why this file exists: the paper's main results (Table 4, AmoebaNet-B 84.4% top-1) are on
// ImageNet, distributed as folders of JPEGs. Layout under the root:
//
//   train/<wnid>/*.JPEG                       class index = position of wnid in sorted order
//   val/<wnid>/*.JPEG                         either class folders, as for train,
//   val/*.JPEG + a labels file                or one flat folder plus labels
//
// A labels file for a flat val/ has one line per image, either "<file> <label>" (whitespace or
// comma separated, file with or without extension, e.g. Kaggle's LOC_val_solution.csv) or a
// ground-truth list of just "<label>", the i-th line for the i-th file in sorted order. A label
// is a wnid or a 0-based class index in sorted-wnid order. (The devkit's
// ILSVRC2012_validation_ground_truth.txt numbers classes 1..1000 in its own order: map it to
// wnids first.) Files are .JPEG/.jpg/.jpeg/.png in any case; other files are ignored. Images
// are decoded on demand (image.h, OpenCV), so a corrupt one is found when it is first read.
#pragma once

#include <string>
#include <vector>

#include "gpipe/datasets/source.h"
#include "gpipe/datasets/split.h"

namespace gpipe::datasets {

class ImageFolder : public ImageSource {
 public:
  // The classes are train/'s subfolders (val/'s when there is no train/). `labels_file` is
  // only read for a flat val/; empty means the first of <root>/val_labels.txt,
  // <root>/LOC_val_solution.csv, <root>/val/labels.txt that exists. Throws DataError naming
  // the folder or file: missing folder, empty class folder, a val class that train lacks,
  // missing labels file, a label out of range or unknown (with its line), an image without a
  // label, a count mismatch.
  ImageFolder(const std::string& root, Split split, const std::string& labels_file = "");

  // Every image file under the class folders of `dir`; for generic class-folder datasets.
  static ImageFolder from_class_folders(const std::string& dir);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t label(int64_t index) const override { return labels_[index]; }
  HwcImage image(int64_t index) const override;
  const std::vector<std::string>& classes() const override { return classes_; }
  int64_t channels() const override { return 3; }
  std::string describe(int64_t index) const override { return files_[index]; }

  const std::string& path(int64_t index) const { return files_[index]; }

 private:
  ImageFolder() = default;
  // Appends every image under <dir>/<class>/ for each class in classes_ present there (all of
  // them when `require_all`).
  void add_class_folders(const std::string& dir, bool require_all);
  void add_flat_folder(const std::string& dir, const std::string& labels_file);

  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
};

// True for the image extensions read: .jpeg, .jpg, .png in any case.
bool is_image_file(const std::string& path);

}  // namespace gpipe::datasets
