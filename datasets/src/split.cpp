#include "gpipe/datasets/split.h"

#include "gpipe/errors.h"

namespace gpipe::datasets {

std::string to_string(Split split) {
  return split == Split::kTrain ? "train" : "test";
}

Split parse_split(const std::string& text) {
  if (text == "train") return Split::kTrain;
  if (text == "test" || text == "val") return Split::kTest;
  throw ConfigError(c10::str("unknown split '", text, "'; use train or test"));
}

}  // namespace gpipe::datasets
