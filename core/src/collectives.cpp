// The collectives a distributed step needs, on the Context's process groups: sums of a few
// numbers (batch sizes, the loss, gradient norms), the data-parallel sum of a gradient bucket
// and a barrier. A collective that fails or times out becomes Context::fail, which names the lost
// rank when the watchdog knows it. Rendezvous and the watchdog are distributed.cpp.
#include "gpipe/distributed.h"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace gpipe::distributed {

bool is_gloo(const c10d::ProcessGroup& group) {
  return group.getBackendName() == "gloo";
}

c10::intrusive_ptr<c10d::Work> start_all_reduce(c10d::ProcessGroup& group,
                                                std::vector<at::Tensor>& tensors) {
  // NCCL's start may first build the group's communicator, waiting for its other ranks: never
  // under a lock one of this process's other groups may need to make progress.
  if (!is_gloo(group)) return group.allreduce(tensors);
  static std::mutex starting;
  std::lock_guard<std::mutex> lock(starting);
  return group.allreduce(tensors);
}

torch::Tensor Context::all_reduce(c10d::ProcessGroup& group, torch::Tensor tensor,
                                  const char* what) {
  std::vector<at::Tensor> tensors{std::move(tensor)};
  try {
    start_all_reduce(group, tensors)->wait(options_.timeout());
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    fail(c10::str(what, " failed: ", error_message(e).substr(0, 300)), peers_in(group));
  }
  return tensors[0];
}

std::vector<double> Context::sum_scalars(c10d::ProcessGroup& group,
                                         const std::vector<double>& values, const char* what) {
  // One buffer per purpose, kept as long as the Context: a fresh tensor would often lose its
  // last reference on Gloo's worker thread, freeing its memory there while we read the sums,
  // an order TSan cannot see through Gloo's uninstrumented reference counting.
  const auto n = static_cast<int64_t>(values.size());
  auto& buffer = scalar_buffers_[what];
  if (!buffer.defined() || buffer.numel() != n) buffer = torch::empty({n}, torch::kDouble);
  std::copy(values.begin(), values.end(), buffer.data_ptr<double>());
  try {
    all_reduce(group, buffer, what);
  } catch (...) {
    // A collective that timed out may still write into the buffer: never reuse it.
    scalar_buffers_.erase(what);
    throw;
  }
  const double* sums = buffer.data_ptr<double>();
  return {sums, sums + n};
}

int64_t Context::global_batch(int64_t local) {
  if (replicas() == 1) return local;
  const auto sums =
      sum_scalars(*data_parallel_, {static_cast<double>(local)}, "summing batch sizes");
  return static_cast<int64_t>(std::llround(sums[0]));
}

std::pair<double, bool> Context::reduce_loss(double local_partial, bool local_ok) {
  const auto sums = sum_scalars(*world_, {local_ok ? local_partial : 0.0, local_ok ? 0.0 : 1.0},
                                "reducing the loss");
  return {sums[0], sums[1] == 0.0};
}

void Context::sum_gradient_bucket(torch::Tensor& flat) {
  flat = all_reduce(*data_parallel_, flat, "summing gradients over replicas");
}

void Context::sum_batchnorm_statistics(torch::Tensor& statistics) {
  GPIPE_CHECK(statistics_ != nullptr, ConfigError,
              "synchronised BatchNorm needs a Context made with ContextOptions::sync_batchnorm");
  statistics = all_reduce(*statistics_, statistics, "summing BatchNorm statistics over replicas");
}

double Context::sum_over_stages(double local) {
  // Every replica holds the same reduced gradients: sum over the world, divide by R.
  return sum_scalars(*world_, {local}, "summing norms")[0] / static_cast<double>(replicas());
}

std::vector<double> Context::sum_over_world(const std::vector<double>& values) {
  return sum_scalars(*world_, values, "summing over the world");
}

void Context::barrier() {
  sum_scalars(*world_, {0.0}, "barrier");
}

}  // namespace gpipe::distributed
