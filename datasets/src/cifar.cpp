#include "gpipe/datasets/cifar.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpipe/datasets/errors.h"
#include "gpipe/files.h"

namespace gpipe::datasets {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string>& cifar10_classes() {
  static const std::vector<std::string> names = {
      "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  return names;
}

const std::vector<std::string>& cifar100_classes() {
  static const std::vector<std::string> names = {
      "apple",       "aquarium_fish", "baby",      "bear",       "beaver",       "bed",
      "bee",         "beetle",        "bicycle",   "bottle",     "bowl",         "boy",
      "bridge",      "bus",           "butterfly", "camel",      "can",          "castle",
      "caterpillar", "cattle",        "chair",     "chimpanzee", "clock",        "cloud",
      "cockroach",   "couch",         "crab",      "crocodile",  "cup",          "dinosaur",
      "dolphin",     "elephant",      "flatfish",  "forest",     "fox",          "girl",
      "hamster",     "house",         "kangaroo",  "keyboard",   "lamp",         "lawn_mower",
      "leopard",     "lion",          "lizard",    "lobster",    "man",          "maple_tree",
      "motorcycle",  "mountain",      "mouse",     "mushroom",   "oak_tree",     "orange",
      "orchid",      "otter",         "palm_tree", "pear",       "pickup_truck", "pine_tree",
      "plain",       "plate",         "poppy",     "porcupine",  "possum",       "rabbit",
      "raccoon",     "ray",           "road",      "rocket",     "rose",         "sea",
      "seal",        "shark",         "shrew",     "skunk",      "skyscraper",   "snail",
      "snake",       "spider",        "squirrel",  "streetcar",  "sunflower",    "sweet_pepper",
      "table",       "tank",          "telephone", "television", "tiger",        "tractor",
      "train",       "trout",         "tulip",     "turtle",     "wardrobe",     "whale",
      "willow_tree", "wolf",          "woman",     "worm"};
  return names;
}

// Non-empty lines of a names file, which must hold exactly `expected` of them.
std::vector<std::string> read_names(const fs::path& path, int64_t expected) {
  std::istringstream file(read_data_file(path.string(), "class names file", 1 << 20));
  std::vector<std::string> names;
  std::string line;
  while (std::getline(file, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  GPIPE_CHECK(static_cast<int64_t>(names.size()) == expected, DataError, "class names file ",
              path.string(), " has ", names.size(), " names; expected ", expected);
  return names;
}

}  // namespace

CifarSource::CifarSource(const std::string& dir, Split split, int64_t num_classes) {
  GPIPE_CHECK(num_classes == 10 || num_classes == 100, ConfigError,
              "CIFAR has 10 or 100 classes, got ", num_classes);
  GPIPE_CHECK(fs::is_directory(dir), DataError, "data folder ", dir, " does not exist (CIFAR-",
              num_classes, " binary files expected there)");
  const bool ten = num_classes == 10;
  std::vector<std::string> names;
  if (ten) {
    if (split == Split::kTrain) {
      for (int i = 1; i <= 5; ++i)
        names.push_back("data_batch_" + std::to_string(i) + ".bin");
    } else {
      names = {"test_batch.bin"};
    }
  } else {
    names = {split == Split::kTrain ? "train.bin" : "test.bin"};
  }
  // The folder holding the first file: dir itself or the archive's folder inside it.
  fs::path folder = dir;
  const fs::path nested = fs::path(dir) / (ten ? "cifar-10-batches-bin" : "cifar-100-binary");
  if (!fs::exists(folder / names[0]) && fs::exists(nested / names[0])) folder = nested;

  const int64_t label_bytes = ten ? 1 : 2;
  const int64_t record = label_bytes + kImageBytes;
  for (const auto& name : names) {
    const auto path = (folder / name).string();
    GPIPE_CHECK(fs::exists(path), DataError, "CIFAR-", num_classes, " file ", path,
                " does not exist");
    check_data_file(path, "CIFAR file");  // a regular file, not a FIFO
    const auto bytes = static_cast<int64_t>(fs::file_size(path));
    GPIPE_CHECK(bytes > 0, DataError, "CIFAR-", num_classes, " file ", path, " is empty");
    GPIPE_CHECK(bytes % record == 0, DataError, "CIFAR-", num_classes, " file ", path,
                " is truncated or corrupt: ", bytes, " bytes is not a whole number of ", record,
                "-byte records; record ", bytes / record, " starts at offset ",
                bytes / record * record, " and is ", record - bytes % record, " bytes short");
    std::ifstream file(path, std::ios::binary);
    std::vector<uint8_t> data(static_cast<size_t>(bytes));
    GPIPE_CHECK(file.read(reinterpret_cast<char*>(data.data()), bytes), DataError, "cannot read ",
                path, ": read stopped at offset ", file.gcount());
    const int64_t records = bytes / record;
    files_.push_back(path);
    file_starts_.push_back(static_cast<int64_t>(labels_.size()));
    pixels_.reserve(pixels_.size() + records * kImageBytes);
    for (int64_t r = 0; r < records; ++r) {
      const int64_t offset = r * record + label_bytes - 1;  // the (fine) label
      const int64_t label = data[offset];
      GPIPE_CHECK(label < num_classes, DataError, "label ", label, " of record ", r, " in ", path,
                  " (byte offset ", offset, ") is out of range [0, ", num_classes, ")");
      labels_.push_back(label);
      const auto* pixels = data.data() + r * record + label_bytes;
      pixels_.insert(pixels_.end(), pixels, pixels + kImageBytes);
    }
  }
  const fs::path names_file = folder / (ten ? "batches.meta.txt" : "fine_label_names.txt");
  classes_ = fs::exists(names_file) ? read_names(names_file, num_classes)
                                    : (ten ? cifar10_classes() : cifar100_classes());
}

HwcImage CifarSource::image(int64_t index) const {
  HwcImage out(kSide, kSide, 3);
  const uint8_t* planes = pixels_.data() + index * kImageBytes;
  constexpr int64_t kPlane = kSide * kSide;
  for (int64_t y = 0; y < kSide; ++y) {
    auto* row = out.row(static_cast<int>(y));
    for (int64_t x = 0; x < kSide; ++x) {
      for (int64_t c = 0; c < 3; ++c)
        row[3 * x + c] = planes[c * kPlane + y * kSide + x];
    }
  }
  return out;
}

std::string CifarSource::describe(int64_t index) const {
  const auto at = std::upper_bound(file_starts_.begin(), file_starts_.end(), index) - 1;
  const auto file = at - file_starts_.begin();
  return c10::str(files_[file], " record ", index - *at);
}

}  // namespace gpipe::datasets
