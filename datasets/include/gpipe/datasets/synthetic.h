// Synthetic images and token sequences, for benchmarks and for runs without data.
//
// Why this file exists: the paper's throughput and memory tables (Tables 1-3) do not depend on
// the data, and a benchmark should not wait for a download. Both generators are pure functions
// of (seed, index), so a synthetic dataset is as reproducible as a real one, and both carry a
// learnable signal, so a training run on them shows a falling loss:
// - SyntheticImages: image i has class i % classes; its pixels are uniform noise of width 128
//   around a colour fixed per (class, channel).
// - SyntheticTokens: sequence i starts at a random token; each next token is (7 t + 3) mod
//   vocab with probability 3/4 and uniform otherwise. The target is the input shifted by one.
#pragma once

#include <string>
#include <vector>

#include "gpipe/datasets/dataset.h"
#include "gpipe/datasets/source.h"

namespace gpipe::datasets {

class SyntheticImages : public ImageSource {
 public:
  // count images of channels x size x size in `classes` classes.
  SyntheticImages(int64_t count, int64_t classes, int64_t channels, int64_t size,
                  uint64_t seed = 0);

  int64_t size() const override { return count_; }
  int64_t label(int64_t index) const override { return index % num_classes_; }
  HwcImage image(int64_t index) const override;
  const std::vector<std::string>& classes() const override { return classes_; }
  int64_t channels() const override { return channels_; }
  std::string describe(int64_t index) const override;

 private:
  int64_t count_;
  int64_t num_classes_;
  int64_t channels_;
  int64_t side_;
  uint64_t seed_;
  std::vector<std::string> classes_;
};

class SyntheticTokens : public Dataset {
 public:
  SyntheticTokens(int64_t count, int64_t seq_len, int64_t vocab, uint64_t seed = 0);

  int64_t size() const override { return count_; }
  int64_t num_classes() const override { return vocab_; }
  int64_t channels() const override { return 0; }
  std::vector<int64_t> example_shape() const override { return {seq_len_}; }
  // input (T) int64, target (T) int64 = the next tokens. `rng` is not used: the sequences are
  // fixed data, not augmentation.
  Example get(int64_t index, Rng& rng) const override;
  std::string name() const override { return "synthetic-tokens"; }

 private:
  int64_t count_;
  int64_t seq_len_;
  int64_t vocab_;
  uint64_t seed_;
};

}  // namespace gpipe::datasets
