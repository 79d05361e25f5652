// The memory meter: current and peak bytes per pipeline device.
//
// Why this file exists: the paper's Table 1 is about what fits in each device's memory, so the
// engine must say how much each device held at its peak. On CUDA the caching allocator keeps
// those statistics. On CPU every virtual device shares one heap, so the meter installs an
// allocator wrapper as LibTorch's CPU allocator that charges each allocation to the device of
// the thread that made it (the stage workers set it) and releases it from the same device,
// whichever thread frees it. Allocations by threads outside any stage go to the host slot.
#pragma once

#include <torch/torch.h>

#include "gpipe/device.h"

namespace gpipe::memory {

struct DeviceStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

// Installs the CPU meter as LibTorch's CPU allocator. Idempotent; the Pipeline calls it.
// Allocations made before it was installed are not counted.
void install();
bool installed();

// Charges this thread's future CPU allocations to `device` (the host slot for cuda devices).
void set_thread_device(const DeviceSpec& device);
// Charges this thread's future CPU allocations to the host slot.
void clear_thread_device();

DeviceStats stats(const DeviceSpec& device);
// Statistics of allocations made outside any device thread.
DeviceStats host_stats();
// Sets the device's peak to its current bytes, so a later peak is the peak since now.
void reset_peak(const DeviceSpec& device);

// Moves the accounting of `tensor`'s CPU storage to `device` without copying. Returns false if
// the meter does not know the storage (allocated before install()); the caller may then copy it.
bool charge(const torch::Tensor& tensor, const DeviceSpec& device);

}  // namespace gpipe::memory
