#include "gpipe/memory.h"

#include "gpipe/errors.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

#ifdef GPIPE_WITH_CUDA
#include <ATen/Context.h>
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
constexpr int kWindows = 64;  // peak windows open at once on one slot (bits of `open`)

void raise_to(std::atomic<int64_t>& peak, int64_t now) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

// One slot's bytes. `add` raises the lifetime peak and the peak of every open window; a window
// sets its bit before it reads `current`, so (both sequentially consistent) every allocation is
// either seen by the window's first read or raises the window's peak itself.
struct Counter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<uint64_t> open{0};
  std::array<std::atomic<int64_t>, kWindows> window_peak{};

  void add(int64_t bytes) {
    const int64_t now = current.fetch_add(bytes) + bytes;
    raise_to(peak, now);
    for (uint64_t bits = open.load(); bits != 0; bits &= bits - 1)
      raise_to(window_peak[__builtin_ctzll(bits)], now);
  }
  void sub(int64_t bytes) { current.fetch_sub(bytes); }
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

// Serialises opening and closing windows (allocations never take it).
std::mutex& window_mutex() {
  static auto* mutex = new std::mutex();  // never destroyed, like the counters
  return *mutex;
}

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

#ifdef GPIPE_WITH_CUDA
namespace {
// CUDA's caching allocator learns the device count only when CUDA is first initialised (the
// first tensor on a GPU, in a program with no Python); until then its statistics and peak reset
// throw "Invalid device argument". The meter may be read first (a window opened before a step,
// a report before any work), so it initialises CUDA itself, as that first allocation would,
// and reads zeros on an untouched device. The one place where the two LibTorch APIs differ.
void cuda_allocator_ready() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
#else
  at::globalContext().lazyInitCUDA();
#endif
}
}  // namespace
#endif

DeviceStats stats(const DeviceSpec& device) {
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) {
    cuda_allocator_ready();
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

PeakWindow::PeakWindow(const DeviceSpec& device) : device_(device) {
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) {
    const auto index = static_cast<c10::DeviceIndex>(device.index);
    cuda_allocator_ready();
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    start_bytes_ = stats(device).current_bytes;
    return;
  }
#endif
  auto& counter = MeteredCpuAllocator::counters()[slot_of(device)];
  std::lock_guard<std::mutex> lock(window_mutex());
  const uint64_t bits = counter.open.load();
  GPIPE_CHECK(bits != ~uint64_t{0}, Error, "more than ", kWindows, " memory windows are open on ",
              device.str(), " at once; destroy the pipelines or profilers no longer in use");
  index_ = __builtin_ctzll(~bits);
  slot_ = slot_of(device);
  counter.window_peak[index_].store(0);
  counter.open.fetch_or(uint64_t{1} << index_);
  start_bytes_ = counter.current.load();
  raise_to(counter.window_peak[index_], start_bytes_);
}

PeakWindow::~PeakWindow() {
  close();
}

PeakWindow::PeakWindow(PeakWindow&& other) noexcept
    : device_(other.device_),
      slot_(std::exchange(other.slot_, -1)),
      index_(std::exchange(other.index_, -1)),
      start_bytes_(other.start_bytes_) {}

PeakWindow& PeakWindow::operator=(PeakWindow&& other) noexcept {
  if (this != &other) {
    close();
    device_ = other.device_;
    slot_ = std::exchange(other.slot_, -1);
    index_ = std::exchange(other.index_, -1);
    start_bytes_ = other.start_bytes_;
  }
  return *this;
}

void PeakWindow::close() {
  if (slot_ < 0) return;
  std::lock_guard<std::mutex> lock(window_mutex());
  MeteredCpuAllocator::counters()[slot_].open.fetch_and(~(uint64_t{1} << index_));
  slot_ = -1;
  index_ = -1;
}

int64_t PeakWindow::peak_bytes() const {
  if (device_.is_cuda()) return stats(device_).peak_bytes;
  if (slot_ < 0) return start_bytes_;
  return MeteredCpuAllocator::counters()[slot_].window_peak[index_].load();
}

bool charge(const torch::Tensor& tensor, const DeviceSpec& device) {
  if (!tensor.defined() || !tensor.device().is_cpu() || !g_installed) return false;
  void* data = tensor.storage().data_ptr().get();
  if (data == nullptr) return true;  // empty storage: nothing to charge
  return MeteredCpuAllocator::move(data, slot_of(device));
}

}  // namespace gpipe::memory
