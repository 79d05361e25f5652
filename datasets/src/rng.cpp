#include "gpipe/datasets/rng.h"

#include <ATen/CPUGeneratorImpl.h>

#include "gpipe/errors.h"

namespace gpipe::datasets {
namespace {

// Key separators: the augmentation and the shuffle of the same (seed, epoch) never share a
// stream.
constexpr uint64_t kSampleStream = 0x53414d504c45ULL;   // "SAMPLE"
constexpr uint64_t kShuffleStream = 0x53485546464cULL;  // "SHUFFL"

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

uint64_t mix_seed(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x243f6a8885a308d3ULL;  // digits of pi: a non-zero start
  for (uint64_t part : parts) {
    uint64_t x = h ^ part;
    h = splitmix64(x);
  }
  return h;
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& word : state_)
    word = splitmix64(x);
}

Rng Rng::for_sample(uint64_t seed, int64_t epoch, int64_t index) {
  return Rng(
      mix_seed({seed, kSampleStream, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)}));
}

uint64_t Rng::next() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double Rng::uniform(double lo, double hi) {
  return lo + (hi - lo) * uniform();
}

int64_t Rng::below(int64_t n) {
  GPIPE_CHECK(n > 0, ConfigError, "Rng::below needs a positive bound, got ", n);
  const uint64_t bound = static_cast<uint64_t>(n);
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x = next();
  while (x >= limit)
    x = next();
  return static_cast<int64_t>(x % bound);
}

bool Rng::bernoulli(double p) {
  return uniform() < p;
}

at::Generator Rng::torch_generator() {
  return at::make_generator<at::CPUGeneratorImpl>(next());
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  GPIPE_CHECK(n >= 0, ConfigError, "epoch_order needs n >= 0, got ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    order[i] = i;
  if (!shuffle) return order;
  Rng rng(mix_seed({seed, kShuffleStream, static_cast<uint64_t>(epoch)}));
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[i], order[rng.below(i + 1)]);
  return order;
}

}  // namespace gpipe::datasets
