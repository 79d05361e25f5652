#include "gpipe/datasets/synthetic.h"

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {
namespace {

constexpr uint64_t kImageStream = 0x494d414745ULL;  // "IMAGE"
constexpr uint64_t kTokenStream = 0x544f4b454eULL;  // "TOKEN"

}  // namespace

SyntheticImages::SyntheticImages(int64_t count, int64_t classes, int64_t channels, int64_t size,
                                 uint64_t seed)
    : count_(count), num_classes_(classes), channels_(channels), side_(size), seed_(seed) {
  GPIPE_CHECK(count > 0, ConfigError, "synthetic images need count > 0, got ", count);
  GPIPE_CHECK(classes > 0 && classes <= 65536, ConfigError,
              "synthetic images need 1 to 65536 classes, got ", classes);
  GPIPE_CHECK(channels == 1 || channels == 3, ConfigError,
              "synthetic images have 1 or 3 channels, got ", channels);
  GPIPE_CHECK(size > 0 && size <= 4096, ConfigError,
              "synthetic image size must be in [1, 4096], got ", size);
  for (int64_t c = 0; c < classes; ++c)
    classes_.push_back("class_" + std::to_string(c));
}

HwcImage SyntheticImages::image(int64_t index) const {
  GPIPE_CHECK(index >= 0 && index < count_, ConfigError, "synthetic image index ", index,
              " out of range [0, ", count_, ")");
  const int64_t label = index % num_classes_;
  // The class colour: 64..191 per channel, a pure function of (seed, class, channel).
  int base[3];
  for (int64_t c = 0; c < channels_; ++c) {
    Rng colour(
        mix_seed({seed_, kImageStream, static_cast<uint64_t>(label), static_cast<uint64_t>(c), 0}));
    base[c] = 64 + static_cast<int>(colour.below(128));
  }
  Rng rng(mix_seed({seed_, kImageStream, static_cast<uint64_t>(index), 1}));
  const int side = static_cast<int>(side_);
  HwcImage out(side, side, static_cast<int>(channels_));
  for (int y = 0; y < side; ++y) {
    auto* row = out.row(y);
    for (int64_t x = 0; x < side * channels_; x += channels_) {
      const uint64_t bits = rng.next();
      for (int64_t c = 0; c < channels_; ++c)
        row[x + c] = static_cast<uint8_t>(base[c] - 64 + static_cast<int>((bits >> (8 * c)) & 127));
    }
  }
  return out;
}

std::string SyntheticImages::describe(int64_t index) const {
  return c10::str("synthetic image ", index);
}

SyntheticTokens::SyntheticTokens(int64_t count, int64_t seq_len, int64_t vocab, uint64_t seed)
    : count_(count), seq_len_(seq_len), vocab_(vocab), seed_(seed) {
  GPIPE_CHECK(count > 0, ConfigError, "synthetic tokens need count > 0, got ", count);
  GPIPE_CHECK(seq_len > 0, ConfigError, "synthetic tokens need seq_len > 0, got ", seq_len);
  GPIPE_CHECK(vocab > 1, ConfigError, "synthetic tokens need vocab > 1, got ", vocab);
}

Example SyntheticTokens::get(int64_t index, Rng& /*rng*/) const {
  GPIPE_CHECK(index >= 0 && index < count_, ConfigError, "token sequence index ", index,
              " out of range [0, ", count_, ")");
  Rng rng(mix_seed({seed_, kTokenStream, static_cast<uint64_t>(index)}));
  auto sequence = torch::empty({seq_len_ + 1}, torch::kInt64);
  auto* tokens = sequence.data_ptr<int64_t>();
  tokens[0] = rng.below(vocab_);
  for (int64_t t = 1; t <= seq_len_; ++t) {
    tokens[t] = rng.below(4) < 3 ? (7 * tokens[t - 1] + 3) % vocab_ : rng.below(vocab_);
  }
  return {sequence.slice(0, 0, seq_len_).clone(), sequence.slice(0, 1, seq_len_ + 1).clone()};
}

}  // namespace gpipe::datasets
