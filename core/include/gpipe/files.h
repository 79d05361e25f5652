// Files: the one way every program reads an input file and writes an output file.
//
// Why this file exists: a run trusts the paths it is given. A FIFO where a manifest was expected
// blocked a resume forever; `--json /dev/null` replaced the device node with a regular file; a
// metrics file on a full disk lost every line without a word; two outputs naming one file wrote
// over each other. So a reader accepts a regular file only (through symlinks) and refuses a
// FIFO, a device or a folder at once, without blocking; a writer accepts a new path or a regular
// file only, writes through a temporary file that it renames over the target, and turns every
// failed write, flush or close into an error naming the file. Shared state (a snapshot folder)
// is held by an advisory lock for a whole run, so a second writer is refused, not interleaved.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpipe {

// Throws InputError naming `path` and `what` ("snapshot manifest", "--labels-file") unless
// `path` is a readable regular file (symlinks followed). Opens it with O_NONBLOCK, so a FIFO
// never blocks the check; for readers that open the file themselves (LibTorch, zlib, OpenCV).
void check_input_file(const std::string& path, const std::string& what);
// The whole of the regular file `path`, read after check_input_file's checks (on the same open
// descriptor). Throws InputError naming it when it is not one, cannot be read, or is larger than
// `max_bytes`.
std::string read_file(const std::string& path, const std::string& what,
                      int64_t max_bytes = int64_t{1} << 30);

// Checks, before any work, that `path` (given by `flag`) can be written: not empty, each name
// within the file system's limits, a new name or a regular file (a folder, FIFO, device, socket
// or dangling symlink is refused: a rename would replace it), in a writable folder that exists.
// Throws ConfigError naming the flag, the path and the fix. Inside a command-line validator
// `flag` is empty (the parser names the flag itself).
void check_output_file(const std::string& path, const std::string& flag);
// Checks that the folder `path` exists or can be created: its nearest existing ancestor is a
// writable folder.
void check_output_folder(const std::string& path, const std::string& flag);
// Refuses two of a run's outputs (flag, path) that name one file, through symlinks and ".."
// alike: each would silently replace the other.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);

// Writes `text` to `path` through a temporary file in the same folder and a rename, so a reader
// never sees a half-written file; a symlink to a regular file is written through (the file it
// names is replaced, the link stays). Re-checks that the target is a new name or a regular file.
// Throws Error naming the file when a write, flush, sync or close fails (a full disk) or the
// target is not a regular file; the temporary file is removed then.
void write_file(const std::string& path, const std::string& text);

// An output file that grows line by line (metrics.jsonl): opened for appending after the checks
// of check_output_file, every write checked. Throws Error naming the file when a write fails.
class AppendFile {
 public:
  AppendFile() = default;
  // `truncate`: start the file empty instead of appending.
  AppendFile(const std::string& path, bool truncate);
  ~AppendFile();
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  void write(const std::string& text);
  // Closes the file, throwing Error naming it when the close fails.
  void close();

 private:
  std::string path_;
  int fd_ = -1;
};

// An advisory lock (flock) on `path`, held until destroyed or the process ends (a killed
// process's lock is released by the kernel, so a crash never leaves a folder locked). The lock
// file holds the holder's PID. Throws ConfigError naming `what`, the path and the holder's PID
// when another process holds it.
class FileLock {
 public:
  FileLock(const std::string& path, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// FNV-1a (64 bits) of a stream of bytes, as 16 hex digits: a shard's checksum, recorded when it
// is written and compared when it is read.
class Checksum {
 public:
  void update(const void* data, size_t size);
  std::string hex() const;

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

// The Checksum of the bytes of the regular file `path`. Throws InputError naming the file when
// it cannot be read.
std::string file_checksum(const std::string& path);

}  // namespace gpipe
