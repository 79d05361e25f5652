// Fuzz target: the CIFAR-10 binary reader. The input is the test batch file; every record it
// accepts must decode to a 32x32 image with a label below 10.
#include <filesystem>

#include "fuzz_util.h"
#include "gpipe/datasets/cifar.h"
#include "gpipe/datasets/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = gpipe::fuzz::scratch() / "cifar";
  std::filesystem::create_directories(dir);
  gpipe::fuzz::write_file(dir / "test_batch.bin", data, size);
  try {
    gpipe::datasets::CifarSource source(dir.string(), gpipe::datasets::Split::kTest, 10);
    for (int64_t i = 0; i < source.size() && i < 4; ++i) {
      const auto image = source.image(i);
      if (image.height() != 32 || image.width() != 32 || source.label(i) < 0 ||
          source.label(i) >= 10)
        std::abort();
    }
  } catch (const gpipe::InputError&) {
  }
  return 0;
}
