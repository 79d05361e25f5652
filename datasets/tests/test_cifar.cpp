// CIFAR-10 and CIFAR-100 binary files: layout, fine labels, and bad files.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

// CIFAR-10: batch b (1..5) holds 2 records with labels b and b + 1 (mod 10); test holds 3.
void write_cifar10(const std::string& dir) {
  for (int b = 1; b <= 5; ++b) {
    write_cifar_file(dir + "/data_batch_" + std::to_string(b) + ".bin",
                     {{static_cast<uint8_t>(b)}, {static_cast<uint8_t>((b + 1) % 10)}},
                     2 * (b - 1));
  }
  write_cifar_file(dir + "/test_batch.bin", {{7}, {8}, {9}});
}

TEST(Cifar10, ReadsAllTrainingBatchesInOrder) {
  TempDir dir;
  write_cifar10(dir.str());
  CifarSource train(dir.str(), Split::kTrain, 10);
  ASSERT_EQ(train.size(), 10);
  EXPECT_EQ(train.files().size(), 5u);
  EXPECT_EQ(train.label(0), 1);
  EXPECT_EQ(train.label(9), 6);
  EXPECT_EQ(train.classes().size(), 10u);
  EXPECT_EQ(train.classes()[0], "airplane");
  EXPECT_NE(train.describe(9).find("data_batch_5.bin record 1"), std::string::npos);
  CifarSource test(dir.str(), Split::kTest, 10);
  EXPECT_EQ(test.size(), 3);
  EXPECT_EQ(test.label(2), 9);
}

TEST(Cifar10, PlanarPixelsBecomeRgbHwc) {
  TempDir dir;
  write_cifar10(dir.str());
  CifarSource train(dir.str(), Split::kTrain, 10);
  const auto image = train.image(4);  // record 4: R = 12, G = 13, B = 14
  ASSERT_EQ(image.channels(), 3);
  ASSERT_EQ(image.height(), 32);
  ASSERT_EQ(image.width(), 32);
  EXPECT_EQ(image.at(10, 20, 0), 12);
  EXPECT_EQ(image.at(10, 20, 1), 13);
  EXPECT_EQ(image.at(10, 20, 2), 14);
  EXPECT_EQ(image.at(0, 1, 0), 1);  // pixel 1 of each plane
  EXPECT_EQ(image.at(0, 1, 1), 2);
  EXPECT_EQ(image.at(0, 1, 2), 3);
}

TEST(Cifar10, FindsTheArchiveFolderAndItsClassNames) {
  TempDir dir;
  const auto nested = dir / "cifar-10-batches-bin";
  write_cifar10(nested);
  std::ofstream(nested + "/batches.meta.txt") << "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n\n";
  CifarSource train(dir.str(), Split::kTrain, 10);
  EXPECT_EQ(train.size(), 10);
  EXPECT_EQ(train.classes()[9], "j");
  std::ofstream(nested + "/batches.meta.txt") << "a\nb\n";
  expect_error<DataError>([&] { CifarSource(dir.str(), Split::kTrain, 10); },
                          {"batches.meta.txt", "2 names", "expected 10"});
}

TEST(Cifar100, UsesTheFineLabel) {
  TempDir dir;
  // Coarse labels 0..19 differ from the fine ones.
  write_cifar_file(dir / "train.bin", {{3, 42}, {19, 99}, {0, 0}});
  write_cifar_file(dir / "test.bin", {{5, 77}});
  CifarSource train(dir.str(), Split::kTrain, 100);
  ASSERT_EQ(train.size(), 3);
  EXPECT_EQ(train.label(0), 42);
  EXPECT_EQ(train.label(1), 99);
  EXPECT_EQ(train.classes().size(), 100u);
  EXPECT_EQ(train.classes()[99], "worm");
  const auto record1 = train.image(1);
  EXPECT_EQ(record1.at(5, 5, 0), 3);  // record 1
  EXPECT_EQ(record1.at(5, 5, 1), 4);
  EXPECT_EQ(record1.at(5, 5, 2), 5);
  EXPECT_EQ(CifarSource(dir.str(), Split::kTest, 100).label(0), 77);
}

TEST(Cifar, TruncatedFileNamesFileRecordAndOffset) {
  TempDir dir;
  write_cifar10(dir.str());
  auto bytes = read_bytes(dir / "data_batch_3.bin");
  bytes.resize(bytes.size() - 100);  // record 1 starts at 3073, 100 bytes short
  write_bytes(dir / "data_batch_3.bin", bytes);
  expect_error<DataError>([&] { CifarSource(dir.str(), Split::kTrain, 10); },
                          {"data_batch_3.bin", "truncated", "3073-byte records", "record 1",
                           "offset 3073", "100 bytes short"});
}

TEST(Cifar, LabelOutOfRangeNamesFileRecordAndOffset) {
  TempDir dir;
  write_cifar_file(dir / "train.bin", {{1, 5}, {2, 100}});
  expect_error<DataError>([&] { CifarSource(dir.str(), Split::kTrain, 100); },
                          {"train.bin", "label 100", "record 1", "byte offset 3075", "[0, 100)"});
  write_cifar_file(dir / "test_batch.bin", {{10}});
  expect_error<DataError>([&] { CifarSource(dir.str(), Split::kTest, 10); },
                          {"test_batch.bin", "label 10", "record 0", "byte offset 0"});
}

TEST(Cifar, MissingFolderFileAndEmptyFile) {
  TempDir dir;
  expect_error<DataError>([&] { CifarSource(dir / "absent", Split::kTrain, 10); },
                          {"absent", "does not exist"});
  expect_error<DataError>([&] { CifarSource(dir.str(), Split::kTest, 100); },
                          {"test.bin", "does not exist"});
  write_bytes(dir / "test.bin", {});
  expect_error<DataError>([&] { CifarSource(dir.str(), Split::kTest, 100); },
                          {"test.bin", "empty"});
  expect_error<ConfigError>([&] { CifarSource(dir.str(), Split::kTest, 20); }, {"20"});
}

}  // namespace
}  // namespace gpipe::datasets::testing
