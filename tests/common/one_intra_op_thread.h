// Plain-model references that tests compare a pipeline with run on one intra-op thread, as the
// pipelines under test do (threads_per_device(1)). LibTorch 2.x's CPU kernels (BatchNorm's
// reductions among them) sum in another order on two threads than on one, and gradients then
// differed from the pipeline's by up to 3e-4 relative, over the tests' tolerances; on one thread
// both sum alike. LibTorch 1.13 happened to agree either way.
#pragma once

#include <ATen/Parallel.h>

namespace gpipe::testing {

// Sets LibTorch's intra-op threads to one for its lifetime, then restores them.
class OneIntraOpThread {
 public:
  OneIntraOpThread() : saved_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneIntraOpThread() { at::set_num_threads(saved_); }
  OneIntraOpThread(const OneIntraOpThread&) = delete;
  OneIntraOpThread& operator=(const OneIntraOpThread&) = delete;

 private:
  int saved_;
};

}  // namespace gpipe::testing
