// The IDX file format of MNIST and Fashion-MNIST, plain or gzip-compressed.
//
// Why this file exists: the files are read as published (Debian's dataset-fashion-mnist ships
// them gzipped), and a truncated download or a wrong file must fail with the file named and
// the byte offset where it went wrong, not with a short read or an out-of-bounds access.
//
// Format: bytes 0-1 are zero, byte 2 the element type (0x08: unsigned byte, the only one these
// datasets use), byte 3 the number of dimensions d, then d big-endian uint32 sizes, then the
// elements in row-major order; nothing after them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::datasets {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Reads an unsigned-byte IDX file; a gzip stream (first bytes 1f 8b) is decompressed on the fly.
// Offsets in messages count bytes of the uncompressed content. Throws DataError when the file
// is missing, truncated, has trailing bytes, a bad header, or a corrupt gzip stream.
IdxArray read_idx(const std::string& path);

// Writes an unsigned-byte IDX file, gzip-compressed when `gzip`. For tests and tools.
void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip);

}  // namespace gpipe::datasets
