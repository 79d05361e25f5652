// Devices of a pipeline, and the worker thread that runs each stage.
//
// Why this file exists: `cpu:N` is a virtual device. Every stage owns one worker thread with its
// own intra-op thread count, so K virtual devices on one CPU behave like K accelerators, each
// running its stage's forward and backward (LibTorch runs the CPU backward of a graph on the
// calling thread, so the backward of each stage runs on that stage's thread). The worker also
// tells the memory meter which device its allocations belong to. `cuda:N` exists only in
// builds against a CUDA LibTorch.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpipe {

// A pipeline device: `cpu:N` (virtual) or `cuda:N`.
struct DeviceSpec {
  torch::DeviceType type = torch::kCPU;
  int index = 0;

  // Parses "cpu", "cpu:3", "cuda:1". Throws ConfigError for anything else, and for cuda when
  // this build or machine has no CUDA.
  static DeviceSpec parse(const std::string& text);
  // The LibTorch device tensors of this stage live on (all virtual CPU devices are torch::kCPU).
  torch::Device torch_device() const;
  // The memory meter's slot: CPU virtual devices and CUDA devices are counted apart.
  bool is_cuda() const { return type == torch::kCUDA; }
  std::string str() const;
  bool operator==(const DeviceSpec& other) const {
    return type == other.type && index == other.index;
  }
};

// "cpu:0,cpu:1" -> two DeviceSpecs.
std::vector<DeviceSpec> parse_devices(const std::string& comma_separated);
// cpu:0 .. cpu:K-1.
std::vector<DeviceSpec> default_cpu_devices(int64_t count);

// One thread that runs submitted tasks in order, bound to a device.
class DeviceWorker {
 public:
  // intra_op_threads: LibTorch/OpenMP threads this worker's operators may use (>= 1).
  DeviceWorker(DeviceSpec device, int intra_op_threads);
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  // Runs `task` on the worker thread; the future carries its exception, if any.
  std::future<void> submit(std::function<void()> task);
  // submit() and wait, rethrowing the task's exception.
  void run(std::function<void()> task);

  const DeviceSpec& device() const { return device_; }
  int intra_op_threads() const { return intra_op_threads_; }

  // The device of the worker whose thread calls this; nullptr on any other thread (the main
  // thread, an intra-op thread). Lets a profiler charge work to the stage that ran it.
  static const DeviceSpec* current();

 private:
  void loop();

  DeviceSpec device_;
  int intra_op_threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

// Number of hardware threads, at least 1.
int hardware_threads();

}  // namespace gpipe
