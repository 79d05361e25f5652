#include "gpipe/datasets/mnist.h"

#include <filesystem>

#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/idx.h"

namespace gpipe::datasets {
namespace {

namespace fs = std::filesystem;

// The first of <stem>-<kind>-ubyte, <stem>-<kind>-ubyte.gz, <stem>.<kind>-ubyte(.gz) in dir.
std::string find_idx(const std::string& dir, const std::string& stem, const std::string& kind) {
  std::vector<std::string> tried;
  for (const char* separator : {"-", "."}) {
    for (const char* suffix : {"", ".gz"}) {
      const auto path = (fs::path(dir) / (stem + separator + kind + "-ubyte" + suffix)).string();
      if (fs::is_regular_file(path)) return path;
      tried.push_back(fs::path(path).filename().string());
    }
  }
  std::string names;
  for (const auto& name : tried)
    names += (names.empty() ? "" : ", ") + name;
  throw DataError(c10::str("no ", stem, " ", kind, " file in ", dir, " (looked for ", names, ")"));
}

}  // namespace

MnistSource::MnistSource(const std::string& dir, Split split, std::vector<std::string> classes)
    : classes_(std::move(classes)) {
  GPIPE_CHECK(fs::is_directory(dir), DataError, "data folder ", dir,
              " does not exist (MNIST/Fashion-MNIST IDX files expected there)");
  const std::string stem = split == Split::kTrain ? "train" : "t10k";
  images_path_ = find_idx(dir, stem, "images-idx3");
  labels_path_ = find_idx(dir, stem, "labels-idx1");

  auto images = read_idx(images_path_);
  GPIPE_CHECK(images.dims.size() == 3, DataError, "image file ", images_path_, " has ",
              images.dims.size(), " dimensions ", c10::IntArrayRef(images.dims),
              "; expected 3 (count, rows, columns)");
  auto labels = read_idx(labels_path_);
  GPIPE_CHECK(labels.dims.size() == 1, DataError, "label file ", labels_path_, " has ",
              labels.dims.size(), " dimensions ", c10::IntArrayRef(labels.dims),
              "; expected 1 (count)");
  GPIPE_CHECK(images.dims[0] == labels.dims[0], DataError, images_path_, " holds ", images.dims[0],
              " images but ", labels_path_, " holds ", labels.dims[0], " labels");
  count_ = images.dims[0];
  rows_ = images.dims[1];
  cols_ = images.dims[2];
  GPIPE_CHECK(count_ > 0 && rows_ > 0 && cols_ > 0, DataError, "image file ", images_path_,
              " holds no images (dimensions ", c10::IntArrayRef(images.dims), ")");
  constexpr int64_t kLabelHeader = 8;  // magic + one dimension size
  labels_.resize(count_);
  const int64_t num_classes = static_cast<int64_t>(classes_.size());
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t label = labels.data[i];
    GPIPE_CHECK(label < num_classes, DataError, "label ", label, " of image ", i, " in ",
                labels_path_, " (byte offset ", kLabelHeader + i,
                " of the uncompressed file) is out of range [0, ", num_classes, ")");
    labels_[i] = label;
  }
  pixels_ = std::move(images.data);
}

HwcImage MnistSource::image(int64_t index) const {
  const auto* data = pixels_.data() + index * rows_ * cols_;
  return HwcImage(static_cast<int>(rows_), static_cast<int>(cols_), 1,
                  std::vector<uint8_t>(data, data + rows_ * cols_));
}

std::string MnistSource::describe(int64_t index) const {
  return c10::str(images_path_, " image ", index);
}

std::vector<std::string> MnistSource::fashion_mnist_classes() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
}

std::vector<std::string> MnistSource::mnist_classes() {
  return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
}

}  // namespace gpipe::datasets
