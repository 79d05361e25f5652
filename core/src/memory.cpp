#include "gpipe/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>

#ifdef GPIPE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

// LibTorch 2.3 made Allocator::allocate non-const and added the pure virtual copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define GPIPE_ALLOCATE_CONST
#define GPIPE_ALLOCATOR_HAS_COPY_DATA 1
#else
#define GPIPE_ALLOCATE_CONST const
#endif

namespace gpipe::memory {
namespace {

constexpr int kDeviceSlots = 256;        // virtual CPU devices cpu:0 .. cpu:255
constexpr int kHostSlot = kDeviceSlots;  // everything else
constexpr int kShards = 64;

struct Counter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};

  void add(int64_t bytes) {
    const int64_t now = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void sub(int64_t bytes) { current.fetch_sub(bytes, std::memory_order_relaxed); }
};

struct Record {
  int64_t bytes;
  int slot;
};

struct Shard {
  std::mutex mutex;
  std::unordered_map<void*, Record> records;
};

thread_local int tls_slot = kHostSlot;

// Wraps c10's CPU allocation functions; the data pointer is its own context, so raw_allocate
// and raw_deleter work as for the default allocator.
class MeteredCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) GPIPE_ALLOCATE_CONST override {
    void* data = c10::alloc_cpu(bytes);
    if (data != nullptr) track(data, static_cast<int64_t>(bytes), tls_slot);
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
#ifdef GPIPE_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  static void release(void* data) {
    if (data == nullptr) return;
    auto& shard = shard_of(data);
    Record record{0, kHostSlot};
    bool found = false;
    {
      std::lock_guard<std::mutex> lock(shard.mutex);
      auto it = shard.records.find(data);
      if (it != shard.records.end()) {
        record = it->second;
        shard.records.erase(it);
        found = true;
      }
    }
    if (found) counters()[record.slot].sub(record.bytes);
    c10::free_cpu(data);
  }

  static bool move(void* data, int slot) {
    auto& shard = shard_of(data);
    Record record{0, kHostSlot};
    {
      std::lock_guard<std::mutex> lock(shard.mutex);
      auto it = shard.records.find(data);
      if (it == shard.records.end()) return false;
      record = it->second;
      it->second.slot = slot;
    }
    if (record.slot != slot) {
      counters()[record.slot].sub(record.bytes);
      counters()[slot].add(record.bytes);
    }
    return true;
  }

  static std::array<Counter, kDeviceSlots + 1>& counters() {
    static auto* counters = new std::array<Counter, kDeviceSlots + 1>();  // never destroyed
    return *counters;
  }

 private:
  static void track(void* data, int64_t bytes, int slot) {
    auto& shard = shard_of(data);
    {
      std::lock_guard<std::mutex> lock(shard.mutex);
      shard.records.emplace(data, Record{bytes, slot});
    }
    counters()[slot].add(bytes);
  }

  static Shard& shard_of(void* data) {
    static auto* shards = new std::array<Shard, kShards>();   // outlives every tensor
    const auto key = reinterpret_cast<uintptr_t>(data) >> 6;  // allocations are 64-byte aligned
    return (*shards)[(key ^ (key >> 7)) % kShards];
  }
};

std::atomic<bool> g_installed{false};

int slot_of(const DeviceSpec& device) {
  if (device.is_cuda() || device.index < 0 || device.index >= kDeviceSlots) return kHostSlot;
  return device.index;
}

DeviceStats read(int slot) {
  auto& counter = MeteredCpuAllocator::counters()[slot];
  return {counter.current.load(), counter.peak.load()};
}

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    static auto* allocator = new MeteredCpuAllocator();  // must outlive every CPU tensor
    c10::SetCPUAllocator(allocator, /*priority=*/1);
    g_installed = true;
  });
}

bool installed() {
  return g_installed.load();
}

void set_thread_device(const DeviceSpec& device) {
  tls_slot = slot_of(device);
}

void clear_thread_device() {
  tls_slot = kHostSlot;
}

DeviceStats stats(const DeviceSpec& device) {
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) {
    // Index 0 of each statistic array is the aggregate over pools in every LibTorch version.
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device.index));
    return {s.allocated_bytes[0].current, s.allocated_bytes[0].peak};
  }
#endif
  return read(slot_of(device));
}

DeviceStats host_stats() {
  return read(kHostSlot);
}

void reset_peak(const DeviceSpec& device) {
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device.index));
    return;
  }
#endif
  auto& counter = MeteredCpuAllocator::counters()[slot_of(device)];
  counter.peak.store(counter.current.load());
}

bool charge(const torch::Tensor& tensor, const DeviceSpec& device) {
  if (!tensor.defined() || !tensor.device().is_cpu() || !g_installed) return false;
  void* data = tensor.storage().data_ptr().get();
  if (data == nullptr) return true;  // empty storage: nothing to charge
  return MeteredCpuAllocator::move(data, slot_of(device));
}

}  // namespace gpipe::memory
