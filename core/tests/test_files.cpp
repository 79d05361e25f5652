// Files (files.h): readers take regular files only and never block on a FIFO; writers refuse
// what a rename would destroy, write through symlinks, and name every failure; a lock has one
// holder; checksums are FNV-1a.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gpipe/errors.h"
#include "gpipe/files.h"

namespace gpipe {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the temporary folder, removed with the fixture.
class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpipe_files_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string fifo() const {
    const auto p = path("fifo");
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p;
  }

  fs::path dir_;
};

// The message of what `f` throws as `E`, or "" when it throws nothing.
template <typename E, typename F>
std::string thrown(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST_F(FilesTest, ReadersRefuseAFifoADeviceAndAFolderWithoutBlocking) {
  const auto pipe = fifo();  // nobody writes: an open for reading without O_NONBLOCK would block
  EXPECT_NE(thrown<InputError>([&] { read_file(pipe, "--labels-file"); }).find("is a FIFO"),
            std::string::npos);
  EXPECT_NE(
      thrown<InputError>([&] { check_input_file("/dev/null", "x"); }).find("is a character device"),
      std::string::npos);
  EXPECT_NE(thrown<InputError>([&] { read_file(dir_.string(), "x"); }).find("is a folder"),
            std::string::npos);
  EXPECT_NE(thrown<InputError>([&] { read_file(path("missing"), "x"); }).find("missing"),
            std::string::npos);
  std::ofstream(path("big")) << std::string(100, 'x');
  EXPECT_NE(thrown<InputError>([&] { read_file(path("big"), "x", 99); }).find("100 bytes"),
            std::string::npos);
  // Through a symlink, a regular file reads as itself.
  std::ofstream(path("real")) << "hello";
  fs::create_symlink(path("real"), path("link"));
  EXPECT_EQ(read_file(path("link"), "x"), "hello");
}

TEST_F(FilesTest, OutputsAreNewNamesOrRegularFiles) {
  EXPECT_EQ(thrown<ConfigError>([&] { check_output_file(path("new.json"), "--json"); }), "");
  std::ofstream(path("old.json")) << "{}";
  EXPECT_EQ(thrown<ConfigError>([&] { check_output_file(path("old.json"), "--json"); }), "");
  EXPECT_NE(thrown<ConfigError>([&] {
              check_output_file("/dev/null", "--json");
            }).find("--json '/dev/null' is a character device"),
            std::string::npos);
  EXPECT_NE(thrown<ConfigError>([&] { check_output_file(fifo(), "--metrics"); }).find("a FIFO"),
            std::string::npos);
  fs::create_symlink("/dev/null", path("to-device"));
  EXPECT_NE(thrown<ConfigError>([&] {
              check_output_file(path("to-device"), "--trace");
            }).find("character device"),
            std::string::npos);
  fs::create_symlink(path("nowhere"), path("dangling"));
  EXPECT_NE(thrown<ConfigError>([&] {
              check_output_file(path("dangling"), "--json");
            }).find("symlink to nothing"),
            std::string::npos);
  EXPECT_NE(thrown<ConfigError>([&] {
              check_output_file(path(std::string(300, 'a')), "--json");
            }).find("300 characters"),
            std::string::npos);
  // Two outputs naming one file, through a symlink and "..".
  fs::create_symlink(path("old.json"), path("alias.json"));
  EXPECT_NE(
      thrown<ConfigError>([&] {
        check_distinct_outputs({{"--json", path("old.json")}, {"--trace", path("alias.json")}});
      }).find("--json and --trace name the same file"),
      std::string::npos);
  EXPECT_NE(thrown<ConfigError>([&] {
              check_distinct_outputs({{"--json", path("a")}, {"--metrics", path("x/../a")}});
            }).find("name the same file"),
            std::string::npos);
  EXPECT_EQ(thrown<ConfigError>([&] {
              check_distinct_outputs({{"--json", path("a")}, {"--metrics", path("b")}, {"x", ""}});
            }),
            "");
}

TEST_F(FilesTest, WriteFileReplacesARegularFileAndWritesThroughASymlink) {
  write_file(path("out"), "one");
  write_file(path("out"), "two");
  EXPECT_EQ(read_file(path("out"), "x"), "two");
  fs::create_symlink(path("out"), path("link"));
  write_file(path("link"), "three");
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(read_file(path("out"), "x"), "three");
  // A FIFO is never replaced; nothing is left beside it.
  const auto pipe = fifo();
  EXPECT_NE(thrown<Error>([&] { write_file(pipe, "x"); }).find("a FIFO"), std::string::npos);
  EXPECT_TRUE(fs::is_fifo(pipe));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3);
}

TEST_F(FilesTest, AppendFileAppendsAndRefusesADevice) {
  {
    AppendFile log(path("m.jsonl"), /*truncate=*/true);
    log.write("1\n");
  }
  {
    AppendFile log(path("m.jsonl"), /*truncate=*/false);
    log.write("2\n");
    log.close();
  }
  EXPECT_EQ(read_file(path("m.jsonl"), "x"), "1\n2\n");
  EXPECT_NE(thrown<Error>([&] { AppendFile("/dev/full", false); }).find("character device"),
            std::string::npos);
  EXPECT_NE(thrown<Error>([&] { AppendFile(fifo(), false); }).find("a FIFO"), std::string::npos);
}

TEST_F(FilesTest, ALockHasOneHolderNamedByItsPid) {
  const auto lock_path = path(".lock");
  {
    FileLock first(lock_path, "--snapshot-dir 'ck'");
    const auto message =
        thrown<ConfigError>([&] { FileLock second(lock_path, "--snapshot-dir 'ck'"); });
    EXPECT_NE(
        message.find("--snapshot-dir 'ck' is in use by process " + std::to_string(::getpid())),
        std::string::npos)
        << message;
  }
  FileLock again(lock_path, "--snapshot-dir 'ck'");  // released with its holder
}

TEST_F(FilesTest, ChecksumsAreFnv1a) {
  Checksum empty;
  EXPECT_EQ(empty.hex(), "cbf29ce484222325");
  Checksum a;
  a.update("a", 1);
  EXPECT_EQ(a.hex(), "af63dc4c8601ec8c");
  std::ofstream(path("a")) << "a";
  EXPECT_EQ(file_checksum(path("a")), "af63dc4c8601ec8c");
}

}  // namespace
}  // namespace gpipe
