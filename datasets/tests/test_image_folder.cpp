// ImageNet folders: train classes by sorted wnid, both val layouts, and every bad layout.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

// train/ with classes n03 (2 images), n01 (3), n02 (1, a PNG), plus a stray text file.
void write_train(const TempDir& root) {
  write_small_image(root / "train/n03/a.JPEG", 1);
  write_small_image(root / "train/n03/b.JPEG", 2);
  write_small_image(root / "train/n01/x.jpg", 3);
  write_small_image(root / "train/n01/y.jpeg", 4);
  write_small_image(root / "train/n01/z.JPG", 5);
  write_small_image(root / "train/n02/only.png", 6);
  std::ofstream(root / "train/n02/README.txt") << "not an image\n";
}

// A flat val/ of four images v0..v3.
void write_flat_val(const TempDir& root) {
  for (int i = 0; i < 4; ++i)
    write_small_image(root / ("val/ILSVRC2012_val_0000000" + std::to_string(i) + ".JPEG"), i);
}

std::vector<int64_t> labels(const ImageSource& source) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < source.size(); ++i)
    out.push_back(source.label(i));
  return out;
}

TEST(ImageFolder, TrainClassesAreSortedWnids) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  ImageFolder train(root.str(), Split::kTrain);
  EXPECT_EQ(train.classes(), (std::vector<std::string>{"n01", "n02", "n03"}));
  ASSERT_EQ(train.size(), 6);  // the .txt file is not an image
  EXPECT_EQ(labels(train), (std::vector<int64_t>{0, 0, 0, 1, 2, 2}));
  EXPECT_NE(train.path(3).find("n02/only.png"), std::string::npos);
  const auto image = train.image(0);
  EXPECT_EQ(image.height(), 16);
  EXPECT_EQ(image.width(), 20);
  EXPECT_EQ(image.channels(), 3);
}

TEST(ImageFolder, ValAsClassFolders) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_small_image(root / "val/n03/v1.JPEG");
  write_small_image(root / "val/n01/v2.JPEG");
  ImageFolder val(root.str(), Split::kTest);
  EXPECT_EQ(val.classes().size(), 3u);  // train's classes, even where val lacks one
  EXPECT_EQ(labels(val), (std::vector<int64_t>{0, 2}));
}

TEST(ImageFolder, FlatValWithFileAndLabelLines) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_flat_val(root);
  // Class indexes and wnids, extension given or not, lines in any order.
  std::ofstream(root / "val_labels.txt") << "ILSVRC2012_val_00000003.JPEG 1\n"
                                            "ILSVRC2012_val_00000000 n03\n"
                                            "\n"
                                            "ILSVRC2012_val_00000002.JPEG 0\n"
                                            "ILSVRC2012_val_00000001.JPEG n02\n"
                                            "ILSVRC2012_val_00000099.JPEG 0\n";  // not present
  ImageFolder val(root.str(), Split::kTest);
  EXPECT_EQ(labels(val), (std::vector<int64_t>{2, 1, 0, 1}));
}

TEST(ImageFolder, FlatValWithKaggleCsv) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_flat_val(root);
  std::ofstream(root / "LOC_val_solution.csv")
      << "ImageId,PredictionString\n"
         "ILSVRC2012_val_00000000,n02 1 2 3 4 n02 5 6 7 8\n"
         "ILSVRC2012_val_00000001,n01 1 2 3 4\n"
         "ILSVRC2012_val_00000002,n03 1 2 3 4\n"
         "ILSVRC2012_val_00000003,n03 1 2 3 4\n";
  ImageFolder val(root.str(), Split::kTest);
  EXPECT_EQ(labels(val), (std::vector<int64_t>{1, 0, 2, 2}));
}

TEST(ImageFolder, FlatValWithGroundTruthList) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_flat_val(root);
  std::ofstream(root / "gt.txt") << "2\n0\nn02\n1\n";
  ImageFolder val(root.str(), Split::kTest, root / "gt.txt");
  EXPECT_EQ(labels(val), (std::vector<int64_t>{2, 0, 1, 1}));
}

TEST(ImageFolder, LabelsOutOfRangeOrUnknownNameFileAndLine) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_flat_val(root);
  std::ofstream(root / "gt.txt") << "2\n0\n3\n1\n";
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest, root / "gt.txt"); },
                          {"gt.txt:3", "label 3", "out of range [0, 3)"});
  std::ofstream(root / "named.txt") << "ILSVRC2012_val_00000000.JPEG n01\n"
                                       "ILSVRC2012_val_00000001.JPEG n99\n";
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest, root / "named.txt"); },
                          {"named.txt:2", "'n99'"});
}

TEST(ImageFolder, LabelsFileProblems) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_flat_val(root);
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest); },
                          {"flat", "no labels file", "val_labels.txt"});
  std::ofstream(root / "short.txt") << "0\n1\n";
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest, root / "short.txt"); },
                          {"short.txt", "2 labels", "4 images"});
  std::ofstream(root / "partial.txt") << "ILSVRC2012_val_00000000.JPEG 0\n";
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest, root / "partial.txt"); },
                          {"ILSVRC2012_val_00000001.JPEG", "no label", "partial.txt"});
  std::ofstream(root / "mixed.txt") << "ILSVRC2012_val_00000000.JPEG 0\n1\n";
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest, root / "mixed.txt"); },
                          {"mixed.txt:2"});
  std::ofstream(root / "twice.txt") << "ILSVRC2012_val_00000000.JPEG 0\n"
                                       "ILSVRC2012_val_00000000.JPEG 1\n";
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest, root / "twice.txt"); },
                          {"twice.txt:2", "line 1"});
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest, root / "absent.txt"); },
                          {"absent.txt"});
}

TEST(ImageFolder, MissingFolders) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  expect_error<DataError>([&] { ImageFolder(root / "nowhere", Split::kTrain); },
                          {"nowhere", "does not exist"});
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTrain); },
                          {"train", "does not exist"});
  write_train(root);
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest); },
                          {"val", "does not exist"});
}

TEST(ImageFolder, EmptyClassFolder) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  fs::create_directories(root / "train/n04");
  std::ofstream(root / "train/n04/notes.txt") << "no images here\n";
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTrain); },
                          {"n04", "empty", ".JPEG"});
}

TEST(ImageFolder, ValClassThatTrainLacks) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_small_image(root / "val/n77/v.JPEG");
  expect_error<DataError>([&] { ImageFolder(root.str(), Split::kTest); },
                          {"n77", "not one of the 3 classes"});
}

TEST(ImageFolder, UndecodableImageNamesTheFile) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  write_bytes(root / "train/n02/broken.JPEG", {0xff, 0xd8, 0xff, 0x00, 0x01});
  ImageFolder train(root.str(), Split::kTrain);
  int64_t broken = -1;
  for (int64_t i = 0; i < train.size(); ++i) {
    if (train.path(i).find("broken") != std::string::npos) broken = i;
  }
  ASSERT_GE(broken, 0);
  expect_error<BadImageError>([&] { train.image(broken); }, {"broken.JPEG", "cannot decode"});
}

TEST(ImageFolder, GenericClassFolders) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir root;
  write_train(root);
  const auto folder = ImageFolder::from_class_folders(root / "train");
  EXPECT_EQ(folder.size(), 6);
  expect_error<DataError>([&] { ImageFolder::from_class_folders(root / "none"); }, {"none"});
  EXPECT_TRUE(is_image_file("a/B.JpEg"));
  EXPECT_FALSE(is_image_file("a/b.gif"));
}

}  // namespace
}  // namespace gpipe::datasets::testing
