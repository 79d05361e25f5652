// IDX files, plain and gzipped; truncated and corrupt ones fail with file and offset named.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<uint8_t>(i * 7);
  return data;
}

TEST(Idx, PlainAndGzippedRoundTrip) {
  TempDir dir;
  const auto data = ramp(3 * 4 * 5);
  for (bool gzip : {false, true}) {
    const auto path = dir / (gzip ? "a.gz" : "a");
    write_idx(path, {3, 4, 5}, data, gzip);
    const auto array = read_idx(path);
    EXPECT_EQ(array.dims, (std::vector<int64_t>{3, 4, 5}));
    EXPECT_EQ(array.data, data);
  }
  // The gzipped file really is compressed (magic 1f 8b), the plain one is not.
  EXPECT_EQ(read_bytes(dir / "a.gz")[0], 0x1f);
  EXPECT_EQ(read_bytes(dir / "a").size(), 4u + 3 * 4 + 60);
}

TEST(Idx, TruncatedDataNamesFileAndOffset) {
  TempDir dir;
  write_idx(dir / "full", {10, 2}, ramp(20), false);
  auto bytes = read_bytes(dir / "full");
  bytes.resize(bytes.size() - 5);  // 12-byte header + 15 of 20 data bytes
  write_bytes(dir / "cut", bytes);
  expect_error<DataError>([&] { read_idx(dir / "cut"); },
                          {"cut", "truncated", "20 data bytes", "ends at offset 27"});
}

TEST(Idx, TruncatedGzipNamesTheFile) {
  TempDir dir;
  write_idx(dir / "full.gz", {100, 100}, ramp(10000), true);
  auto bytes = read_bytes(dir / "full.gz");
  bytes.resize(bytes.size() / 2);
  write_bytes(dir / "cut.gz", bytes);
  expect_error<DataError>([&] { read_idx(dir / "cut.gz"); }, {"cut.gz", "offset"});
}

TEST(Idx, CorruptGzipStreamNamesTheFile) {
  TempDir dir;
  write_idx(dir / "ok.gz", {100, 100}, ramp(10000), true);
  auto bytes = read_bytes(dir / "ok.gz");
  for (size_t i = 20; i < bytes.size() - 10; i += 3)
    bytes[i] ^= 0x5a;
  write_bytes(dir / "bad.gz", bytes);
  expect_error<DataError>([&] { read_idx(dir / "bad.gz"); }, {"bad.gz"});
}

TEST(Idx, BadHeadersAreRefused) {
  TempDir dir;
  write_bytes(dir / "short", {0, 0});
  expect_error<DataError>([&] { read_idx(dir / "short"); }, {"short", "truncated", "offset 2"});
  write_bytes(dir / "magic", {0x12, 0x34, 0x08, 1, 0, 0, 0, 0});
  expect_error<DataError>([&] { read_idx(dir / "magic"); },
                          {"magic", "not an IDX file", "offset 0"});
  write_bytes(dir / "float", {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  expect_error<DataError>([&] { read_idx(dir / "float"); }, {"float", "type 13", "offset 2"});
  write_bytes(dir / "dims", {0, 0, 0x08, 9});
  expect_error<DataError>([&] { read_idx(dir / "dims"); }, {"dims", "9 dimensions", "offset 3"});
  write_bytes(dir / "sizes", {0, 0, 0x08, 2, 0, 0, 0, 1});
  expect_error<DataError>([&] { read_idx(dir / "sizes"); }, {"sizes", "truncated", "offset 8"});
}

TEST(Idx, TrailingBytesAreRefused) {
  TempDir dir;
  write_idx(dir / "a", {4}, ramp(4), false);
  auto bytes = read_bytes(dir / "a");
  bytes.push_back(1);
  write_bytes(dir / "long", bytes);
  expect_error<DataError>([&] { read_idx(dir / "long"); }, {"long", "after its data", "offset 12"});
}

TEST(Idx, HugeDeclaredSizeFailsWithoutAllocatingIt) {
  TempDir dir;
  // Claims 2^32 - 1 elements (4 GB) but holds 3 bytes.
  write_bytes(dir / "huge", {0, 0, 0x08, 1, 0xff, 0xff, 0xff, 0xff, 1, 2, 3});
  expect_error<DataError>([&] { read_idx(dir / "huge"); }, {"huge", "truncated", "offset 11"});
}

TEST(Idx, MissingFile) {
  TempDir dir;
  expect_error<DataError>([&] { read_idx(dir / "nothing"); }, {"nothing", "does not exist"});
}

}  // namespace
}  // namespace gpipe::datasets::testing
