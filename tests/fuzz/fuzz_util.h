// Shared by the fuzz targets: a private scratch folder and writing the input into it.
//
// Why this file exists: the readers under test take paths (as users give them), so every input
// is written to a file first. Each target runs its input through the public API and lets only
// the project's typed errors through: anything else escaping (std::out_of_range, bad_alloc, a
// LibTorch error that should have been wrapped) is a defect and libFuzzer reports it as a crash.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace gpipe::fuzz {

// A folder of this process, made once and reused by every input.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "gpipe-fuzz-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    return std::filesystem::path(pattern);
  }();
  return dir;
}

// Writes `size` bytes of `data` to `path` (created or truncated).
inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.good()) std::abort();
}

}  // namespace gpipe::fuzz
