// Typed exceptions of the data area.
//
// Why this file exists: a missing folder, a truncated download or one corrupt JPEG among a
// million must be reported as such, naming the file and where in it things went wrong (byte
// offset, record or line), and a caller must be able to tell bad data from a bad configuration
// (gpipe::ConfigError) and from a single undecodable image that it may choose to skip.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "gpipe/errors.h"
#include "gpipe/files.h"

namespace gpipe::datasets {

// Data that cannot be used (bad input, like InputError): a missing file or folder, an empty class
// folder, a truncated or corrupt file, a label out of range. The message names the file and the
// offset or line.
class DataError : public InputError {
 public:
  using InputError::InputError;
};

// One image that cannot be read or decoded. Datasets built with skip_bad skip it (and count it);
// otherwise it reaches the caller like any DataError.
class BadImageError : public DataError {
 public:
  BadImageError(const std::string& what, std::string path)
      : DataError(what), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// This build cannot decode or encode JPEG and PNG: it was configured without OpenCV, which
// reading an ImageNet folder (and writing JPEGs) needs. The message says how to fix the build.
class ImageCodecsUnavailableError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// `read` (one of files.h's readers) for a data set's own files: what it refuses (a FIFO, a
// device, a folder, a missing file) is a DataError naming the file.
template <typename Read>
auto as_data_error(Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const DataError&) {
    throw;
  } catch (const InputError& e) {
    throw DataError(e.what());
  }
}

// files.h's read_file for a data set's own files (labels, class names).
inline std::string read_data_file(const std::string& path, const std::string& what,
                                  int64_t max_bytes) {
  return as_data_error([&] { return read_file(path, what, max_bytes); });
}

// files.h's check_input_file for a data set's file read by other means (CIFAR's records).
inline void check_data_file(const std::string& path, const std::string& what) {
  as_data_error([&] { check_input_file(path, what); });
}

}  // namespace gpipe::datasets
