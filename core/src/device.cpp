#include "gpipe/device.h"

#include <ATen/Parallel.h>

#include <sstream>

#include "gpipe/errors.h"
#include "gpipe/memory.h"

#ifdef GPIPE_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gpipe {

DeviceSpec DeviceSpec::parse(const std::string& text) {
  DeviceSpec spec;
  std::string kind = text;
  std::string index;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    kind = text.substr(0, colon);
    index = text.substr(colon + 1);
  }
  if (kind == "cpu") {
    spec.type = torch::kCPU;
  } else if (kind == "cuda") {
    spec.type = torch::kCUDA;
  } else {
    throw ConfigError(
        c10::str("unknown device '", text, "': expected cpu:N (a virtual CPU device) or cuda:N"));
  }
  if (!index.empty()) {
    GPIPE_CHECK(index.find_first_not_of("0123456789") == std::string::npos && index.size() < 6,
                ConfigError, "device '", text, "' has a bad index '", index,
                "': expected a non-negative integer");
    spec.index = std::stoi(index);
  }
  if (spec.type == torch::kCUDA) {
#ifdef GPIPE_WITH_CUDA
    const int count = static_cast<int>(torch::cuda::device_count());
    GPIPE_CHECK(spec.index < count, ConfigError, "device '", text, "' does not exist: ", count,
                " CUDA device(s) visible");
#else
    throw ConfigError(c10::str("device '", text,
                               "' needs CUDA, but this build uses a CPU-only LibTorch; use cpu:N "
                               "virtual devices or rebuild against a CUDA LibTorch"));
#endif
  }
  return spec;
}

torch::Device DeviceSpec::torch_device() const {
  return type == torch::kCUDA ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index))
                              : torch::Device(torch::kCPU);
}

std::string DeviceSpec::str() const {
  return (type == torch::kCUDA ? "cuda:" : "cpu:") + std::to_string(index);
}

std::vector<DeviceSpec> parse_devices(const std::string& comma_separated) {
  std::vector<DeviceSpec> devices;
  std::stringstream stream(comma_separated);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (!item.empty()) devices.push_back(DeviceSpec::parse(item));
  }
  GPIPE_CHECK(!devices.empty(), ConfigError, "no devices in '", comma_separated, "'");
  return devices;
}

std::vector<DeviceSpec> default_cpu_devices(int64_t count) {
  std::vector<DeviceSpec> devices;
  for (int64_t i = 0; i < count; ++i)
    devices.push_back({torch::kCPU, static_cast<int>(i)});
  return devices;
}

int hardware_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {
thread_local const DeviceSpec* tls_worker_device = nullptr;
}  // namespace

const DeviceSpec* DeviceWorker::current() {
  return tls_worker_device;
}

DeviceWorker::DeviceWorker(DeviceSpec device, int intra_op_threads)
    : device_(device), intra_op_threads_(intra_op_threads) {
  GPIPE_CHECK(intra_op_threads >= 1, ConfigError,
              "a device needs at least one intra-op thread, got ", intra_op_threads);
  thread_ = std::thread([this] { loop(); });
}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::future<void> DeviceWorker::submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  auto future = packaged.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(packaged));
  }
  cv_.notify_one();
  return future;
}

void DeviceWorker::run(std::function<void()> task) {
  submit(std::move(task)).get();
}

void DeviceWorker::loop() {
  // Initialise this thread's OpenMP state first: LibTorch re-applies the process-wide thread
  // count on a thread's first parallel region, which would undo a per-thread setting made before.
  at::internal::lazy_init_num_threads();
  at::set_num_threads(intra_op_threads_);
  memory::set_thread_device(device_);
  tls_worker_device = &device_;
#ifdef GPIPE_WITH_CUDA
  if (device_.is_cuda()) c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_.index));
#endif
  while (true) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace gpipe
