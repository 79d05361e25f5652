// Fuzz target: the IDX reader (MNIST, Fashion-MNIST), plain and gzip-compressed. A bad file must
// end in DataError naming it, never a crash, a huge allocation or an exception of another type.
#include "fuzz_util.h"
#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = gpipe::fuzz::scratch() / "input.idx";
  gpipe::fuzz::write_file(path, data, size);
  try {
    const auto array = gpipe::datasets::read_idx(path.string());
    size_t expected = 1;
    for (const int64_t d : array.dims)
      expected *= static_cast<size_t>(d);
    if (array.data.size() != expected) std::abort();  // the reader's own promise
  } catch (const gpipe::datasets::DataError&) {
  }
  return 0;
}
