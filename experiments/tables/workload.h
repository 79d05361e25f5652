// A training workload of the table drivers: model, mini-batch, optimizer, and one measured run.
//
// Why this file exists: Tables 1-3 all come down to running real training steps of a real model
// through the Pipeline and reading what it did: how long a step took (Tables 2 and 3) and how many
// bytes each device held at its peak (Table 1). Both drivers build that run here, with an
// optimizer that keeps real state (RMSProp for AmoebaNet as the paper trains it, Adam for the
// Transformer), so the memory per parameter is honest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/pipeline_shape.h"
#include "gpipe/device.h"
#include "gpipe/models/registry.h"
#include "gpipe/pipeline.h"

namespace gpipe::tables {

// "rmsprop" for AmoebaNet (the paper's optimizer; 12 bytes per parameter with its gradient and
// one state slot), "adam" for everything else.
std::string default_optimizer(const std::string& model);
// `name` unless it is "auto", then default_optimizer(model). Throws ConfigError for an unknown
// name (rmsprop | adam | sgd | auto).
std::string resolve_optimizer(const std::string& name, const std::string& model);
// Optimizer state tensors kept per parameter tensor: rmsprop 1 (square average), adam 2, sgd 0.
int64_t optimizer_state_slots(const std::string& name);
// Float32 bytes a parameter costs with its gradient and optimizer state: 4 x (2 + slots), so 12
// for RMSProp, 16 for Adam (the paper's Table 1 counts 12).
int64_t bytes_per_parameter(const std::string& optimizer);
// A factory for Pipeline::set_optimizer (and the profilers): small learning rates, real state.
Pipeline::OptimizerFactory make_optimizer(const std::string& name);

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
  double loss = 0;        // of the last step
  CpuMeter::Reading cpu;  // over the timed steps
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
                                     const std::string& optimizer, int warmup, int steps,
                                     uint64_t seed = 1, const LinkModel& link = {});
// The same with any optimizer factory (gpipe_plan measures with the trainer's own).
TrainingMeasurement measure_training(const models::ModelBuilder& builder,
                                     const models::SampleBatch& batch, const PipelineShape& shape,
                                     const Pipeline::OptimizerFactory& optimizer, int warmup,
                                     int steps, uint64_t seed = 1, const LinkModel& link = {});

// Physical memory of this machine, in bytes (0 if unknown).
int64_t physical_memory_bytes();

}  // namespace gpipe::tables
