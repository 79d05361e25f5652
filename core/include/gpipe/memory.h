// The memory meter: current and peak bytes per pipeline device.
//
// Why this file exists: the paper's Table 1 is about what fits in each device's memory, so the
// engine must say how much each device held at its peak. On CUDA the caching allocator keeps
// those statistics. On CPU every virtual device shares one heap, so the meter, once installed,
// replaces LibTorch's CPU allocator with a wrapper that charges each allocation to the device of
// the thread that made it (the stage workers set it) and releases it from the same device,
// whichever thread frees it. Allocations by threads outside any stage go to the host slot.
//
// The meter is opt-in: nothing installs it but a program or a Pipeline that reports memory
// (PipelineOptions::measure_memory) and the layer profiler. Peaks are read through windows, each
// with its own peak, so two pipelines (or a pipeline and a profiler) measuring one device at
// once never reset each other's figures.
#pragma once

#include <torch/torch.h>

#include "gpipe/device.h"

namespace gpipe::memory {

struct DeviceStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

// Installs the CPU meter as LibTorch's CPU allocator, for the whole process and for good.
// Idempotent. Allocations made before it was installed are not counted.
void install();
bool installed();

// Charges this thread's future CPU allocations to `device` (the host slot for cuda devices).
void set_thread_device(const DeviceSpec& device);
// Charges this thread's future CPU allocations to the host slot.
void clear_thread_device();

// current_bytes: what `device` holds now; peak_bytes: the most it held since install().
DeviceStats stats(const DeviceSpec& device);
// Statistics of allocations made outside any device thread.
DeviceStats host_stats();

// The peak of one device's bytes from the moment it opens until it is destroyed, whatever other
// windows on the device do. At most 64 windows are open on one CPU device at once (Error beyond).
// On CUDA a window resets the caching allocator's peak, which all windows on that GPU share.
class PeakWindow {
 public:
  PeakWindow() = default;  // closed: reads zeros
  explicit PeakWindow(const DeviceSpec& device);
  ~PeakWindow();
  PeakWindow(PeakWindow&& other) noexcept;
  PeakWindow& operator=(PeakWindow&& other) noexcept;
  PeakWindow(const PeakWindow&) = delete;
  PeakWindow& operator=(const PeakWindow&) = delete;

  // The device's bytes when the window opened.
  int64_t start_bytes() const { return start_bytes_; }
  // The most the device held since the window opened (at least start_bytes()).
  int64_t peak_bytes() const;

 private:
  void close();

  DeviceSpec device_;
  int slot_ = -1;   // CPU meter slot; -1 when closed or on CUDA
  int index_ = -1;  // window index within the slot
  int64_t start_bytes_ = 0;
};

// Moves the accounting of `tensor`'s CPU storage to `device` without copying. Returns false if
// the meter does not know the storage (allocated before install()); the caller may then copy it.
bool charge(const torch::Tensor& tensor, const DeviceSpec& device);

}  // namespace gpipe::memory
