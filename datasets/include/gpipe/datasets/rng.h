// Counter-based random numbers for augmentation and shuffling.
//
// Why this file exists: batches must be identical whatever the number of loader workers and
// when an epoch is resumed from a snapshot mid-way, so no draw may depend on which thread ran
// first or on how many samples came before. Every random choice therefore comes from a
// generator that is a pure function of its key: (seed, epoch, sample index) for a sample's
// augmentation, (seed, epoch) for an epoch's order. The generator (xoshiro256**, seeded by
// SplitMix64) and the way it maps bits to numbers are spelled out here, so the streams are the
// same on every platform and standard library.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace gpipe::datasets {

// Hashes the parts of a key into one 64-bit seed (SplitMix64 finaliser over each part).
uint64_t mix_seed(std::initializer_list<uint64_t> parts);

class Rng {
 public:
  explicit Rng(uint64_t seed);

  // The generator of sample `index`'s augmentation in `epoch` of a loader seeded with `seed`.
  static Rng for_sample(uint64_t seed, int64_t epoch, int64_t index);

  // 64 random bits.
  uint64_t next();
  // Uniform in [0, 1), 53 random bits.
  double uniform();
  // Uniform in [lo, hi).
  double uniform(double lo, double hi);
  // Uniform integer in [0, n), without modulo bias; n must be positive.
  int64_t below(int64_t n);
  // True with probability p.
  bool bernoulli(double p);
  // A torch CPU generator seeded from this one, for tensor ops (torch::randn(..., gen)).
  at::Generator torch_generator();

 private:
  uint64_t state_[4];
};

// The order in which an epoch visits samples 0..n-1: 0, 1, ..., n-1 without shuffle, otherwise
// a uniform permutation (Fisher-Yates) that depends on (seed, epoch) alone.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace gpipe::datasets
