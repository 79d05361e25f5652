// Dataset: what the loader and the trainer see. ImageDataset: an ImageSource plus a Transform.
//
//   auto data = make_dataset(DatasetOptions("cifar10").data_dir(dir).augment(true));
//   Rng rng = Rng::for_sample(seed, epoch, 17);
//   Example e = data->get(17, rng);                   // e.input (3, 32, 32), e.target ()
//
// Why this file exists: the loader only needs a size and a thread-safe "transformed example i,
// drawing randomness from this generator"; how the example is made (decoded file, in-memory
// array, synthetic) stays behind it. ImageDataset is also where an undecodable image is skipped
// when the user asked for that: it is logged once, counted, and replaced by the next decodable
// image, so batches keep their size and stay deterministic.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpipe/datasets/batch.h"
#include "gpipe/datasets/rng.h"
#include "gpipe/datasets/source.h"
#include "gpipe/datasets/transform.h"

namespace gpipe::datasets {

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of examples.
  virtual int64_t size() const = 0;
  // Number of classes (image data) or the vocabulary size (token data).
  virtual int64_t num_classes() const = 0;
  // Channels of an image example (1 or 3); 0 for token data.
  virtual int64_t channels() const = 0;
  // Shape of one example's input: {C, H, W} for images, {T} for tokens.
  virtual std::vector<int64_t> example_shape() const = 0;
  // Example `index`, transformed; every random choice is drawn from `rng`. Safe to call from
  // several threads at once (each with its own rng).
  virtual Example get(int64_t index, Rng& rng) const = 0;
  // The dataset's name (imagenet, cifar10, ..., synthetic-tokens).
  virtual std::string name() const = 0;
};

class ImageDataset : public Dataset {
 public:
  // With skip_bad, an image that throws BadImageError is replaced by the next one that decodes
  // (index + 1, index + 2, ... wrapping around); without it the error reaches the caller.
  ImageDataset(std::string name, std::shared_ptr<const ImageSource> source, Transform transform,
               bool skip_bad = false);

  int64_t size() const override { return source_->size(); }
  int64_t num_classes() const override;
  int64_t channels() const override { return source_->channels(); }
  std::vector<int64_t> example_shape() const override;
  Example get(int64_t index, Rng& rng) const override;
  std::string name() const override { return name_; }

  const ImageSource& source() const { return *source_; }
  const Transform& transform() const { return transform_; }
  // Files skipped so far because they could not be decoded (skip_bad only), sorted.
  std::vector<std::string> skipped() const;

 private:
  std::string name_;
  std::shared_ptr<const ImageSource> source_;
  Transform transform_;
  bool skip_bad_;
  mutable std::mutex mutex_;
  mutable std::vector<std::string> skipped_;
};

}  // namespace gpipe::datasets
