// One measured run of real training steps through the Pipeline: step times, memory, timeline.
//
// Why this file exists: the predictions of this project (the planner's plans, the projected
// table columns) are checked against real steps, calibrated by them, and Tables 1-3 report them.
// All of those build a Pipeline of one shape, run warm-up and timed steps, and read the same
// facts back: each step's wall time, who else used the CPU meanwhile, every device's peak, state
// and activation bytes, and the executor's timeline. One function makes that run for all of
// them.
#pragma once

#include <cstdint>
#include <vector>

#include "common/pipeline_shape.h"
#include "gpipe/link.h"
#include "gpipe/models/model.h"
#include "gpipe/pipeline.h"
#include "gpipe/timeline.h"

namespace gpipe::costs {

// Who used the CPU while something ran: this process, and everything else on the machine
// (from /proc/stat). A measured throughput is only this machine's when `other_cores` is near 0.
class CpuMeter {
 public:
  CpuMeter();  // starts
  struct Reading {
    double wall_s = 0;
    double own_cores = 0;    // this process's CPU seconds per wall second
    double other_cores = 0;  // the rest of the machine's busy CPU seconds per wall second
  };
  Reading read() const;

 private:
  double wall_start_ = 0;
  double own_start_ = 0;
  double machine_start_ = -1;  // < 0: /proc/stat unreadable
};

// What measure_training saw.
struct TrainingMeasurement {
  std::vector<double> step_ms;  // wall time of each timed train_step (forward, backward, update)
  double median_step_ms = 0;
  double loss = 0;             // of the last step
  std::vector<double> losses;  // of every step, the warm-up's first
  CpuMeter::Reading cpu;       // over the timed steps
  // Per device, of the last step: the peak bytes over the whole train_step (forward, backward and
  // the optimizer update), the bytes it held when the step began (parameters, gradients,
  // optimizer state), and the activation peak (the forward/backward peak less those).
  std::vector<int64_t> peak_bytes;
  std::vector<int64_t> state_bytes;
  std::vector<int64_t> peak_activation_bytes;
  // The executor's timeline of the last step (every device's actions and waits).
  std::vector<TimelineEvent> last_step_events;
};

// Builds `builder`'s layers, a Pipeline of `shape` with `optimizer` (and `link` imposed on the
// messages between devices), and runs `warmup` untimed and `steps` timed training steps on
// `batch`. The first step creates the optimizer state, so memory
// figures need warmup + steps >= 2 to include it (throws ConfigError otherwise).
TrainingMeasurement measure_training(const models::ModelBuilder& builder,
                                     const models::SampleBatch& batch, const PipelineShape& shape,
                                     const Pipeline::OptimizerFactory& optimizer, int warmup,
                                     int steps, uint64_t seed = 1, const LinkModel& link = {});
}  // namespace gpipe::costs
