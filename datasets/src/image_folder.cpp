#include "gpipe/datasets/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/image.h"
#include "gpipe/files.h"

namespace gpipe::datasets {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Sorted names of the subfolders of dir (want_folders) or sorted paths of its image files.
std::vector<std::string> list_folder(const fs::path& dir, bool want_folders) {
  std::vector<std::string> out;
  try {
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (want_folders && entry.is_directory()) {
        out.push_back(entry.path().filename().string());
      } else if (!want_folders && entry.is_regular_file() && is_image_file(entry.path().string())) {
        out.push_back(entry.path().string());
      }
    }
  } catch (const fs::filesystem_error& e) {
    throw DataError(c10::str("cannot list folder ", dir.string(), ": ", e.code().message()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> subfolders(const fs::path& dir) {
  return list_folder(dir, true);
}

std::vector<std::string> image_files(const fs::path& dir) {
  return list_folder(dir, false);
}

bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Whitespace- or comma-separated tokens of a line.
std::vector<std::string> tokens(const std::string& line) {
  std::string spaced = line;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream stream(spaced);
  std::vector<std::string> out;
  std::string token;
  while (stream >> token)
    out.push_back(token);
  return out;
}

}  // namespace

bool is_image_file(const std::string& path) {
  const auto extension = lower(fs::path(path).extension().string());
  return extension == ".jpeg" || extension == ".jpg" || extension == ".png";
}

ImageFolder::ImageFolder(const std::string& root, Split split, const std::string& labels_file) {
  GPIPE_CHECK(fs::is_directory(root), DataError, "ImageNet folder ", root, " does not exist");
  const fs::path train = fs::path(root) / "train";
  const fs::path val = fs::path(root) / "val";
  const fs::path dir = split == Split::kTrain ? train : val;
  GPIPE_CHECK(fs::is_directory(dir), DataError, "ImageNet ", to_string(split), " folder ",
              dir.string(), " does not exist (expected ", root, "/train/<wnid>/*.JPEG and ", root,
              "/val/)");
  const auto val_classes = split == Split::kTest ? subfolders(val) : std::vector<std::string>{};
  if (fs::is_directory(train)) {
    classes_ = subfolders(train);
    GPIPE_CHECK(!classes_.empty(), DataError, "ImageNet train folder ", train.string(),
                " has no class folders");
  } else {
    classes_ = val_classes;
    GPIPE_CHECK(!classes_.empty(), DataError, "there is no ", train.string(),
                " to take the classes from, and ", val.string(),
                " has no class folders either: cannot tell the classes");
  }
  if (split == Split::kTrain) {
    add_class_folders(train.string(), /*require_all=*/true);
  } else if (!val_classes.empty()) {
    for (const auto& name : val_classes) {
      GPIPE_CHECK(std::binary_search(classes_.begin(), classes_.end(), name), DataError,
                  "val class folder ", (val / name).string(), " is not one of the ",
                  classes_.size(), " classes in ", train.string());
    }
    add_class_folders(val.string(), /*require_all=*/false);
  } else {
    std::string labels = labels_file;
    if (labels.empty()) {
      for (const auto& candidate : {fs::path(root) / "val_labels.txt",
                                    fs::path(root) / "LOC_val_solution.csv", val / "labels.txt"}) {
        if (fs::is_regular_file(candidate)) {
          labels = candidate.string();
          break;
        }
      }
    }
    GPIPE_CHECK(!labels.empty(), DataError, "ImageNet val folder ", val.string(),
                " is flat (no class folders) and no labels file was given or found (looked for ",
                root, "/val_labels.txt, ", root, "/LOC_val_solution.csv, ", val.string(),
                "/labels.txt)");
    add_flat_folder(val.string(), labels);
  }
  GPIPE_CHECK(!files_.empty(), DataError, "ImageNet ", to_string(split), " folder ", dir.string(),
              " holds no images");
}

ImageFolder ImageFolder::from_class_folders(const std::string& dir) {
  GPIPE_CHECK(fs::is_directory(dir), DataError, "image folder ", dir, " does not exist");
  ImageFolder folder;
  folder.classes_ = subfolders(dir);
  GPIPE_CHECK(!folder.classes_.empty(), DataError, "image folder ", dir, " has no class folders");
  folder.add_class_folders(dir, /*require_all=*/true);
  return folder;
}

void ImageFolder::add_class_folders(const std::string& dir, bool require_all) {
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path folder = fs::path(dir) / classes_[c];
    if (!fs::is_directory(folder)) {
      GPIPE_CHECK(!require_all, DataError, "class folder ", folder.string(), " does not exist");
      continue;
    }
    const auto paths = image_files(folder);
    GPIPE_CHECK(!paths.empty(), DataError, "class folder ", folder.string(),
                " is empty: it has no .JPEG, .jpg or .png files");
    for (const auto& path : paths) {
      files_.push_back(path);
      labels_.push_back(static_cast<int64_t>(c));
    }
  }
}

void ImageFolder::add_flat_folder(const std::string& dir, const std::string& labels_file) {
  std::istringstream file(read_data_file(labels_file, "labels file", int64_t{1} << 28));
  const auto paths = image_files(dir);
  GPIPE_CHECK(!paths.empty(), DataError, "ImageNet val folder ", dir,
              " has no class folders and no .JPEG, .jpg or .png files");
  const int64_t num_classes = static_cast<int64_t>(classes_.size());

  // A label token: a class index or a wnid; errors name the file and line.
  auto parse_label = [&](const std::string& token, int64_t line) -> int64_t {
    if (all_digits(token)) {
      const int64_t label = token.size() > 18 ? num_classes : std::stoll(token);
      GPIPE_CHECK(label < num_classes, DataError, labels_file, ":", line, ": label ", token,
                  " is out of range [0, ", num_classes, ")");
      return label;
    }
    const auto at = std::lower_bound(classes_.begin(), classes_.end(), token);
    GPIPE_CHECK(at != classes_.end() && *at == token, DataError, labels_file, ":", line,
                ": label '", token, "' is neither a class index nor one of the ", num_classes,
                " class names");
    return at - classes_.begin();
  };

  std::vector<int64_t> list;                    // ground-truth list form
  std::map<std::string, int64_t> by_name;       // "<file> <label>" form, by file stem
  std::map<std::string, int64_t> line_of_name;  // for duplicate reports
  int form = 0;                                 // 1: list, 2: file and label
  std::string line;
  for (int64_t number = 1; std::getline(file, line); ++number) {
    const auto parts = tokens(line);
    if (parts.empty()) continue;
    if (number == 1 && parts[0] == "ImageId") continue;  // LOC_val_solution.csv header
    const int this_form = parts.size() == 1 ? 1 : 2;
    if (form == 0) form = this_form;
    GPIPE_CHECK(this_form == form, DataError, labels_file, ":", number, ": has ", parts.size(),
                " fields but earlier lines have ", form == 1 ? "one (a label)" : "two or more",
                "; use one form throughout");
    if (form == 1) {
      list.push_back(parse_label(parts[0], number));
    } else {
      const auto stem = fs::path(parts[0]).stem().string();
      const auto [at, inserted] = line_of_name.emplace(stem, number);
      GPIPE_CHECK(inserted, DataError, labels_file, ":", number, ": file ", parts[0],
                  " already has a label on line ", at->second);
      by_name[stem] = parse_label(parts[1], number);
    }
  }
  GPIPE_CHECK(form != 0, DataError, "labels file ", labels_file, " has no labels");
  if (form == 1) {
    GPIPE_CHECK(list.size() == paths.size(), DataError, "labels file ", labels_file, " lists ",
                list.size(), " labels but ", dir, " has ", paths.size(),
                " images; a ground-truth list needs one label per image, in sorted file order");
    files_ = paths;
    labels_ = list;
    return;
  }
  for (const auto& path : paths) {
    const auto at = by_name.find(fs::path(path).stem().string());
    GPIPE_CHECK(at != by_name.end(), DataError, "image ", path, " has no label in ", labels_file);
    files_.push_back(path);
    labels_.push_back(at->second);
  }
}

HwcImage ImageFolder::image(int64_t index) const {
  return read_image(files_[index]);
}

}  // namespace gpipe::datasets
