// dataset_info end to end: the JSON report, --skip-bad, and clean failures on bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdlib>

#include "dataset_info_path.h"  // generated: GPIPE_DATASET_INFO
#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

struct Result {
  int status = -1;
  std::string err;
};

// Runs dataset_info with `args`, stdout and stderr to files in dir.
Result run_tool(const TempDir& dir, const std::string& args) {
  const std::string command = std::string(GPIPE_DATASET_INFO) + " " + args + " > " +
                              (dir / "stdout.txt") + " 2> " + (dir / "stderr.txt");
  const int raw = std::system(command.c_str());
  Result result;
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  const auto err = read_bytes(dir / "stderr.txt");
  result.err.assign(err.begin(), err.end());
  return result;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

TEST(DatasetInfo, ReportsAGeneratedFolderAndSkipsAnUndecodableImage) {
  GPIPE_REQUIRE_IMAGE_CODECS();
  TempDir dir;
  const auto data = dir / "jpegs";
  ASSERT_EQ(run_tool(dir, "--generate-jpegs " + data + " --count 9 --classes 3").status, 0);
  write_bytes(data + "/train/n00000001/n00000001_000001.JPEG", {'n', 'o', 'p', 'e'});

  const auto failed = run_tool(dir, "--dataset imagenet --data-dir " + data + " --split train");
  EXPECT_EQ(failed.status, 2);  // bad input
  EXPECT_NE(failed.err.find("n00000001_000001.JPEG"), std::string::npos) << failed.err;

  const auto ok = run_tool(
      dir, "--dataset imagenet --data-dir " + data + " --skip-bad --json " + (dir / "report.json"));
  ASSERT_EQ(ok.status, 0) << ok.err;
  const auto report = read_json(dir / "report.json");
  const auto& train = report["splits"]["train"];
  EXPECT_EQ(train["count"], 8);
  EXPECT_EQ(train["skipped"], 1);
  EXPECT_EQ(train["class_counts"], nlohmann::json::array({3, 2, 3}));
  EXPECT_EQ(train["classes"][1], "n00000001");
  ASSERT_EQ(train["skipped_files"].size(), 1u);
  EXPECT_NE(train["skipped_files"][0].get<std::string>().find("n00000001_000001.JPEG"),
            std::string::npos);
  EXPECT_EQ(train["mean"].size(), 3u);
  EXPECT_EQ(train["width"]["max"], 500);
  EXPECT_EQ(train["height"]["max"], 375);
  EXPECT_EQ(report["splits"]["test"]["count"], 3);  // max(classes, count / 10) val images
}

TEST(DatasetInfo, BenchmarkReportsBothRates) {
  TempDir dir;
  const auto report = dir / "bench.json";
  const auto result = run_tool(dir,
                               "--dataset synthetic --count 24 --split train --benchmark "
                               "--workers 2 --image-size 16 --batch-size 4 --benchmark-images 24 "
                               "--repeats 1 --json " +
                                   report);
  ASSERT_EQ(result.status, 0) << result.err;
  const auto bench = read_json(report)["benchmark"];
  EXPECT_EQ(bench["images"], 24);
  EXPECT_EQ(bench["workers"], 2);
  EXPECT_GT(bench["single_thread_images_per_second"].get<double>(), 0.0);
  EXPECT_GT(bench["images_per_second"].get<double>(), 0.0);
}

TEST(DatasetInfo, BadInputFailsCleanlyNamingIt) {
  TempDir dir;
  auto missing = run_tool(dir, "--dataset cifar10 --data-dir " + (dir / "absent"));
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("absent"), std::string::npos) << missing.err;

  write_mnist(dir / "mnist", "train", {1, 2, 11}, true);
  auto labels = run_tool(dir, "--dataset mnist --split train --data-dir " + (dir / "mnist"));
  EXPECT_EQ(labels.status, 2);
  EXPECT_NE(labels.err.find("label 11"), std::string::npos) << labels.err;

  EXPECT_EQ(run_tool(dir, "--dataset nonsense").status, 2);
  EXPECT_EQ(run_tool(dir, "").status, 2);
}

}  // namespace
}  // namespace gpipe::datasets::testing
