#include "gpipe/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "gpipe/errors.h"

namespace gpipe {
namespace {

namespace fs = std::filesystem;

// Room left in a name for the temporary suffix write_file adds (".tmp." and a PID).
constexpr size_t kTemporarySuffix = 24;

std::string shown_path(const std::string& path) {
  return "'" + printable(path) + "'";
}

// `flag` begins a message when given; inside a validator the parser names the flag itself.
std::string named(const std::string& flag, const std::string& path) {
  return flag.empty() ? shown_path(path) : flag + " " + shown_path(path);
}

// What a file that is not a regular file is, for messages.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

std::string system_error() {
  return std::strerror(errno);
}

// Clears O_NONBLOCK (set so that opening never waits) on the regular file `fd`.
void make_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

// Opens the regular file `path` for reading; its type is checked before opening (a device is
// never opened) and again on the descriptor (the name may have changed in between).
int open_input(const std::string& path, const std::string& what) {
  GPIPE_CHECK(!path.empty(), InputError, what, ": an empty file name");
  struct stat status {};
  GPIPE_CHECK(::stat(path.c_str(), &status) == 0, InputError, what, " ", shown_path(path),
              " cannot be read: ", system_error());
  GPIPE_CHECK(S_ISREG(status.st_mode), InputError, what, " ", shown_path(path), " is ",
              kind_of(status.st_mode), ", not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  GPIPE_CHECK(fd >= 0, InputError, what, " ", shown_path(path),
              " cannot be read: ", system_error());
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    throw InputError(c10::str(what, " ", shown_path(path), " is ", kind_of(status.st_mode),
                              ", not a regular file"));
  }
  make_blocking(fd);
  return fd;
}

// Closes a descriptor when it goes out of scope.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads the open file `fd` to its end in chunks, handing each to `take` (which may throw);
// throws InputError naming `path` when a read fails.
template <typename Take>
void read_all(int fd, const std::string& path, const std::string& what, Take take) {
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    GPIPE_CHECK(got >= 0, InputError, what, " ", shown_path(path),
                " cannot be read: ", system_error());
    if (got == 0) return;
    take(buffer, static_cast<size_t>(got));
  }
}

// Writes all of `size` bytes at `data` to `fd`; false with errno set on failure.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t wrote = ::write(fd, data, size);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      if (wrote == 0) errno = EIO;
      return false;
    }
    data += wrote;
    size -= static_cast<size_t>(wrote);
  }
  return true;
}

// The file a write to `path` replaces: `path` itself, or what its symlink names.
std::string write_target(const std::string& path) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0 || !S_ISLNK(status.st_mode)) return path;
  std::error_code error;
  const auto target = fs::canonical(path, error);
  GPIPE_CHECK(!error, Error, "cannot write ", shown_path(path), ": it is a symlink to nothing");
  return target.string();
}

// Throws `E` unless `path` is a new name or a regular file (through a symlink).
template <typename E>
void check_replaceable(const std::string& path, const std::string& prefix) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) return;  // a new name
  if (S_ISLNK(status.st_mode) && ::stat(path.c_str(), &status) != 0) {
    throw E(c10::str(prefix, " is a symlink to nothing; give a new file name or a regular file"));
  }
  if (S_ISDIR(status.st_mode)) throw E(c10::str(prefix, " is a folder; give a file name"));
  if (!S_ISREG(status.st_mode)) {
    throw E(c10::str(prefix, " is ", kind_of(status.st_mode),
                     ", not a regular file; an output must be a new file or a regular file"));
  }
}

}  // namespace

void check_input_file(const std::string& path, const std::string& what) {
  ::close(open_input(path, what));
}

std::string read_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  const Descriptor file{open_input(path, what)};
  struct stat status {};
  ::fstat(file.fd, &status);
  GPIPE_CHECK(status.st_size <= max_bytes, InputError, what, " ", shown_path(path), " holds ",
              status.st_size, " bytes, more than the ", max_bytes, " such a file may hold");
  std::string text;
  read_all(file.fd, path, what, [&](const char* data, size_t size) {
    text.append(data, size);
    GPIPE_CHECK(static_cast<int64_t>(text.size()) <= max_bytes, InputError, what, " ",
                shown_path(path), " grew past the ", max_bytes, " bytes such a file may hold");
  });
  return text;
}

void check_output_file(const std::string& path, const std::string& flag) {
  GPIPE_CHECK(!path.empty(), ConfigError, named(flag, path), ": an empty file name");
  GPIPE_CHECK(path.size() + kTemporarySuffix < PATH_MAX, ConfigError,
              named(flag, path).substr(0, 80), "...: a path of ", path.size(),
              " characters is longer than the ", PATH_MAX - kTemporarySuffix,
              " this system allows");
  for (const auto& part : fs::path(path)) {
    GPIPE_CHECK(part.string().size() + kTemporarySuffix <= NAME_MAX, ConfigError,
                named(flag, path).substr(0, 80), "...: the name '",
                printable(part.string()).substr(0, 40), "...' has ", part.string().size(),
                " characters; at most ", NAME_MAX - kTemporarySuffix, " are allowed");
  }
  check_replaceable<ConfigError>(path, named(flag, path));
  std::error_code error;
  const auto target = fs::path(write_target(path));
  const auto parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  GPIPE_CHECK(fs::is_directory(parent, error), ConfigError, named(flag, path), ": the folder '",
              parent.string(), "' does not exist; create it first");
  GPIPE_CHECK(::access(parent.c_str(), W_OK) == 0, ConfigError, named(flag, path), ": the folder '",
              parent.string(), "' is not writable");
}

void check_output_folder(const std::string& path, const std::string& flag) {
  std::error_code error;
  GPIPE_CHECK(!path.empty(), ConfigError, named(flag, path), ": an empty folder name");
  auto existing = fs::absolute(fs::path(path), error);
  while (!fs::exists(existing, error) && existing.has_parent_path() &&
         existing.parent_path() != existing)
    existing = existing.parent_path();
  GPIPE_CHECK(fs::is_directory(existing, error), ConfigError, named(flag, path), ": '",
              existing.string(), "' is not a folder");
  GPIPE_CHECK(::access(existing.c_str(), W_OK) == 0, ConfigError, named(flag, path), ": '",
              existing.string(), "' is not writable");
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  std::vector<std::pair<std::string, fs::path>> seen;
  for (const auto& [flag, path] : outputs) {
    if (path.empty()) continue;
    std::error_code error;
    auto resolved = fs::weakly_canonical(fs::absolute(path, error), error);
    if (error) resolved = fs::absolute(path, error).lexically_normal();
    for (const auto& [other_flag, other] : seen) {
      GPIPE_CHECK(other != resolved, ConfigError, other_flag, " and ", flag, " name the same file ",
                  shown_path(resolved.string()),
                  "; each would replace the other: give each output its own name");
    }
    seen.emplace_back(flag, resolved);
  }
}

void write_file(const std::string& path, const std::string& text) {
  const auto target = write_target(path);
  check_replaceable<Error>(target, "cannot write " + shown_path(path) + ": it");
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  GPIPE_CHECK(fd >= 0, Error, "cannot write ", shown_path(tmp), ": ", system_error());
  const bool wrote = write_all(fd, text.data(), text.size()) && ::fdatasync(fd) == 0;
  const auto reason = system_error();
  const bool closed = ::close(fd) == 0;
  if (!wrote || !closed) {
    const auto why = wrote ? system_error() : reason;
    ::unlink(tmp.c_str());
    throw Error(c10::str("writing ", shown_path(path), " failed: ", why, " (", text.size(),
                         " bytes; is the disk full?)"));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const auto why = system_error();
    ::unlink(tmp.c_str());
    throw Error(c10::str("cannot rename ", shown_path(tmp), " to ", shown_path(target), ": ", why));
  }
}

AppendFile::AppendFile(const std::string& path, bool truncate) : path_(path) {
  check_replaceable<Error>(path, "cannot write " + shown_path(path) + ": it");
  fd_ =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
  GPIPE_CHECK(fd_ >= 0, Error, "cannot write ", shown_path(path), ": ", system_error());
  struct stat status {};
  if (::fstat(fd_, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw Error(c10::str("cannot write ", shown_path(path), ": it is ", kind_of(status.st_mode),
                         ", not a regular file"));
  }
  make_blocking(fd_);
  if (truncate && ::ftruncate(fd_, 0) != 0) {
    const auto why = system_error();
    ::close(fd_);
    fd_ = -1;
    throw Error(c10::str("cannot empty ", shown_path(path), ": ", why));
  }
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void AppendFile::write(const std::string& text) {
  GPIPE_CHECK(fd_ >= 0, Error, "writing ", shown_path(path_), " after it was closed");
  GPIPE_CHECK(write_all(fd_, text.data(), text.size()), Error, "writing ", shown_path(path_),
              " failed: ", system_error(), " (is the disk full?)");
}

void AppendFile::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  GPIPE_CHECK(::close(fd) == 0, Error, "closing ", shown_path(path_), " failed: ", system_error());
}

FileLock::FileLock(const std::string& path, const std::string& what) {
  check_replaceable<ConfigError>(path, what + ": its lock file " + shown_path(path));
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  GPIPE_CHECK(fd_ >= 0, ConfigError, what, ": cannot open its lock file ", shown_path(path), ": ",
              system_error());
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const bool busy = errno == EWOULDBLOCK;
    const auto why = system_error();
    char holder[32] = {};
    const ssize_t got = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    std::string pid = got > 0 ? std::string(holder, static_cast<size_t>(got)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
      pid.pop_back();
    ::close(fd_);
    fd_ = -1;
    GPIPE_CHECK(!busy, ConfigError, what, " is in use by process ",
                pid.empty() ? std::string("?") : printable(pid), " (it holds ", shown_path(path),
                "); wait for that run to end, or choose another folder");
    throw ConfigError(c10::str(what, ": cannot lock ", shown_path(path), ": ", why));
  }
  const auto pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the PID; a second run's message says "?" then.
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

void Checksum::update(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash_ ^= bytes[i];
    hash_ *= 0x100000001b3ULL;
  }
}

std::string Checksum::hex() const {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash_));
  return hex;
}

std::string file_checksum(const std::string& path) {
  const Descriptor file{open_input(path, "file")};
  Checksum checksum;
  read_all(file.fd, path, "file",
           [&](const char* data, size_t size) { checksum.update(data, size); });
  return checksum.hex();
}

}  // namespace gpipe
