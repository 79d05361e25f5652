// Fuzz target: the image-folder decode path (JPEG/PNG/... bytes -> decode -> the training and
// evaluation transforms an ImageFolder applies). The first byte picks grayscale or colour; an
// image that does not decode must end in BadImageError, never a crash.
#include <vector>

#include "fuzz_util.h"
#include "gpipe/datasets/errors.h"
#include "gpipe/datasets/image.h"
#include "gpipe/datasets/rng.h"
#include "gpipe/datasets/transform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpipe::datasets;
  if (size < 1) return 0;
  const bool grayscale = (data[0] & 1) != 0;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  try {
    const auto image = decode_image(bytes, "fuzz-input", grayscale);
    const auto normalization = grayscale ? Normalization{{0.5}, {0.25}} : kImageNetNormalization;
    Rng rng(7);
    for (const bool train : {false, true}) {
      const Transform transform(TransformOptions(16).train(train).normalization(normalization));
      const auto tensor = transform(image, rng);
      if (tensor.size(0) != (grayscale ? 1 : 3) || tensor.size(1) != 16 || tensor.size(2) != 16)
        std::abort();
    }
  } catch (const gpipe::Error&) {
  }
  return 0;
}
