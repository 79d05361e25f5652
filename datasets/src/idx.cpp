#include "gpipe/datasets/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "gpipe/datasets/errors.h"
#include "gpipe/files.h"

namespace gpipe::datasets {
namespace {

// Files with more elements than this are refused as a corrupt header (MNIST train is 47M).
constexpr int64_t kMaxElements = int64_t{1} << 34;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `size` bytes from a zlib stream (plain files pass through unchanged). Returns the
// count read; throws on a stream error.
int64_t read_some(gzFile file, uint8_t* out, int64_t size, const std::string& path,
                  int64_t offset) {
  int64_t done = 0;
  while (done < size) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(size - done, 1 << 20));
    const int got = gzread(file, out + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      throw DataError(c10::str("corrupt compressed data in ", path, " at uncompressed offset ",
                               offset + done, ": ", message));
    }
    if (got == 0) break;
    done += got;
  }
  // A gzip stream cut short reads as end of file; zlib reports it through gzerror.
  int code = 0;
  const char* message = gzerror(file, &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    throw DataError(c10::str("corrupt or truncated compressed data in ", path,
                             " at uncompressed offset ", offset + done, ": ", message));
  }
  return done;
}

uint32_t big_endian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  GPIPE_CHECK(std::filesystem::exists(path), DataError, "IDX file ", path, " does not exist");
  check_input_file(path, "IDX file");  // a FIFO would block gzopen
  GzFile file(gzopen(path.c_str(), "rb"));
  GPIPE_CHECK(file != nullptr, DataError, "cannot open IDX file ", path);
  gzbuffer(file.get(), 1 << 17);

  uint8_t magic[4];
  const int64_t got = read_some(file.get(), magic, 4, path, 0);
  GPIPE_CHECK(got == 4, DataError, "IDX file ", path,
              " is truncated: the 4-byte header ends at offset ", got);
  GPIPE_CHECK(magic[0] == 0 && magic[1] == 0, DataError, "not an IDX file: ", path,
              " starts with bytes ", int{magic[0]}, " ", int{magic[1]},
              " at offset 0 (expected 0 0)");
  GPIPE_CHECK(magic[2] == 0x08, DataError, "IDX file ", path, " has element type ", int{magic[2]},
              " at offset 2; only unsigned bytes (type 8) are supported");
  const int ndims = magic[3];
  GPIPE_CHECK(ndims >= 1 && ndims <= 4, DataError, "IDX file ", path, " declares ", ndims,
              " dimensions at offset 3 (expected 1 to 4)");

  std::vector<uint8_t> sizes(4 * ndims);
  const int64_t got_sizes = read_some(file.get(), sizes.data(), 4 * ndims, path, 4);
  GPIPE_CHECK(got_sizes == 4 * ndims, DataError, "IDX file ", path,
              " is truncated: its dimension sizes end at offset ", 4 + got_sizes, " (header needs ",
              4 + 4 * ndims, " bytes)");
  IdxArray array;
  int64_t elements = 1;
  for (int d = 0; d < ndims; ++d) {
    const int64_t size = big_endian(&sizes[4 * d]);
    array.dims.push_back(size);
    // Checked before multiplying: two 32-bit sizes can overflow int64 (found by fuzz_idx).
    GPIPE_CHECK(size == 0 || elements <= kMaxElements / size, DataError, "IDX file ", path,
                " declares too many elements (dimension sizes ", c10::IntArrayRef(array.dims),
                "): a corrupt header");
    elements *= size;
    GPIPE_CHECK(elements <= kMaxElements, DataError, "IDX file ", path,
                " declares too many elements (dimension sizes ", c10::IntArrayRef(array.dims),
                "): a corrupt header");
  }
  const int64_t header = 4 + 4 * ndims;
  // Checked against the file before allocating: deflate expands at most 1032-fold, so a header
  // claiming more than the file can hold is corrupt (a gzip bomb's ends in std::bad_alloc
  // otherwise), and one past this machine's memory cannot be loaded.
  const auto stored = static_cast<int64_t>(std::filesystem::file_size(path));
  GPIPE_CHECK(elements <= (stored + 64) * 1032, DataError, "IDX file ", path,
              " is truncated or its header corrupt: dimensions ", c10::IntArrayRef(array.dims),
              " need ", elements, " data bytes after the ", header,
              "-byte header, but the file ends at offset ", stored,
              " and cannot hold them even compressed");
  const auto memory = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  GPIPE_CHECK(memory <= 0 || elements <= memory / 2, DataError, "IDX file ", path, " declares ",
              elements, " bytes of data (dimensions ", c10::IntArrayRef(array.dims),
              "), more than half of this machine's ", memory, " bytes of memory");
  // Read in chunks so that a corrupt header claiming gigabytes fails at the end of the file
  // instead of allocating them up front.
  constexpr int64_t kChunk = int64_t{64} << 20;
  int64_t got_data = 0;
  while (got_data < elements) {
    const int64_t want = std::min(kChunk, elements - got_data);
    array.data.resize(static_cast<size_t>(got_data + want));
    const int64_t got_now =
        read_some(file.get(), array.data.data() + got_data, want, path, header + got_data);
    got_data += got_now;
    if (got_now < want) break;
  }
  GPIPE_CHECK(got_data == elements, DataError, "IDX file ", path, " is truncated: dimensions ",
              c10::IntArrayRef(array.dims), " need ", elements, " data bytes after the ", header,
              "-byte header (", header + elements, " in all) but the data ends at offset ",
              header + got_data);
  uint8_t extra;
  GPIPE_CHECK(read_some(file.get(), &extra, 1, path, header + elements) == 0, DataError,
              "IDX file ", path, " has bytes after its data, from offset ", header + elements,
              " (dimensions ", c10::IntArrayRef(array.dims), "): a corrupt or concatenated file");
  return array;
}

void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int64_t size : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      bytes.push_back(static_cast<uint8_t>((size >> shift) & 0xff));
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  GzFile file(gzopen(path.c_str(), gzip ? "wb" : "wbT"));
  GPIPE_CHECK(file != nullptr, DataError, "cannot create ", path);
  const int wrote = gzwrite(file.get(), bytes.data(), static_cast<unsigned>(bytes.size()));
  GPIPE_CHECK(wrote == static_cast<int>(bytes.size()), DataError, "cannot write ", path);
}

}  // namespace gpipe::datasets
