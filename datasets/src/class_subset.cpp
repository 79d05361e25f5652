#include "gpipe/datasets/class_subset.h"

#include <set>
#include <sstream>

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {
namespace {

constexpr int64_t kMaxClass = 65535;

// A class index in [0, kMaxClass], all of `text`.
int64_t class_index(const std::string& text, const std::string& whole) {
  GPIPE_CHECK(!text.empty() && text.size() <= 5 &&
                  text.find_first_not_of("0123456789") == std::string::npos &&
                  std::stoll(text) <= kMaxClass,
              ConfigError, "bad class list '", whole, "': '", text, "' is not a class index in 0-",
              kMaxClass, "; expected e.g. 0-4 or 5,7,9");
  return std::stoll(text);
}

}  // namespace

std::vector<int64_t> parse_class_list(const std::string& text) {
  std::vector<int64_t> classes;
  std::set<int64_t> seen;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto dash = item.find('-');
    const int64_t first = class_index(item.substr(0, dash), text);
    const int64_t last =
        dash == std::string::npos ? first : class_index(item.substr(dash + 1), text);
    GPIPE_CHECK(first <= last, ConfigError, "bad class list '", text, "': range '", item,
                "' runs backwards");
    for (int64_t c = first; c <= last; ++c) {
      GPIPE_CHECK(seen.insert(c).second, ConfigError, "bad class list '", text, "': class ", c,
                  " appears twice");
      classes.push_back(c);
    }
  }
  GPIPE_CHECK(!classes.empty() && text.back() != ',', ConfigError, "bad class list '", text,
              "': expected e.g. 0-4 or 5,7,9");
  return classes;
}

ClassSubset::ClassSubset(std::shared_ptr<const ImageSource> source, std::vector<int64_t> classes)
    : source_(std::move(source)) {
  const auto& all = source_->classes();
  const auto count = static_cast<int64_t>(all.size());
  std::vector<int64_t> new_label(all.size(), -1);
  for (size_t i = 0; i < classes.size(); ++i) {
    const int64_t c = classes[i];
    GPIPE_CHECK(c >= 0 && c < count, ConfigError, "class ", c, " is not in the dataset, which has ",
                count, " classes (0-", count - 1, ")");
    GPIPE_CHECK(new_label[c] < 0, ConfigError, "class ", c, " is listed twice");
    new_label[c] = static_cast<int64_t>(i);
    names_.push_back(all[c]);
  }
  for (int64_t i = 0; i < source_->size(); ++i) {
    const int64_t label = new_label[source_->label(i)];
    if (label < 0) continue;
    indices_.push_back(i);
    labels_.push_back(label);
  }
  GPIPE_CHECK(!indices_.empty(), DataError, "no image of classes ", c10::IntArrayRef(classes),
              " in this split");
}

}  // namespace gpipe::datasets
