#include "costs/measured_step.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>

#include "costs/layer_costs.h"
#include "gpipe/errors.h"
#include "gpipe/timing.h"

namespace gpipe::costs {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double own_cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Busy CPU seconds of the whole machine since boot (user, nice, system, irq, softirq, steal);
// -1 when /proc/stat cannot be read.
double machine_busy_s() {
  std::ifstream stat("/proc/stat");
  std::string line;
  if (!std::getline(stat, line) || line.rfind("cpu ", 0) != 0) return -1;
  std::istringstream fields(line.substr(4));
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  fields >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return fields ? (user + nice + system + irq + softirq + steal) / ticks : -1;
}

}  // namespace

CpuMeter::CpuMeter()
    : wall_start_(now_s()), own_start_(own_cpu_s()), machine_start_(machine_busy_s()) {}

CpuMeter::Reading CpuMeter::read() const {
  Reading r;
  r.wall_s = now_s() - wall_start_;
  if (r.wall_s <= 0) return r;
  const double own = own_cpu_s() - own_start_;
  r.own_cores = own / r.wall_s;
  const double machine = machine_busy_s();
  if (machine_start_ >= 0 && machine >= 0) {
    r.other_cores = std::max(0.0, (machine - machine_start_ - own) / r.wall_s);
  }
  return r;
}

TrainingMeasurement measure_training(const models::ModelBuilder& builder,
                                     const models::SampleBatch& batch, const PipelineShape& shape,
                                     const Pipeline::OptimizerFactory& optimizer, int warmup,
                                     int steps, uint64_t seed, const LinkModel& link) {
  GPIPE_CHECK(warmup >= 0 && steps >= 1, ConfigError,
              "measuring needs warmup >= 0 and steps >= 1, got ", warmup, " and ", steps);
  GPIPE_CHECK(warmup + steps >= 2, ConfigError,
              "measuring needs at least two steps in all (the first creates the optimizer state)");
  auto options = to_pipeline_options(shape);
  options.seed(seed).measure_memory(true).link(link);
  Pipeline pipeline(builder.build(), options, builder.loss());
  pipeline.set_optimizer(optimizer);

  TrainingMeasurement result;
  std::optional<CpuMeter> cpu;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) cpu.emplace();
    const auto start = std::chrono::steady_clock::now();
    result.loss = pipeline.train_step(batch.input, batch.target);
    result.losses.push_back(result.loss);
    for (const auto& device : pipeline.devices()) {
      synchronize(device);
    }
    if (i >= warmup) result.step_ms.push_back(elapsed_ms(start));
  }
  result.cpu = cpu->read();
  result.median_step_ms = median(result.step_ms);
  result.last_step_events = pipeline.timeline().events();

  // The pipeline's window of the last step is still open, so its peak now covers that whole
  // step, optimizer update included.
  const auto& last = pipeline.last_step();
  for (size_t s = 0; s < pipeline.devices().size(); ++s) {
    const int64_t window_peak = last.peak_bytes.at(s);
    const int64_t activation = last.peak_activation_bytes.at(s);
    result.peak_bytes.push_back(pipeline.peak_bytes_since_step_began(s));
    result.state_bytes.push_back(window_peak - activation);
    result.peak_activation_bytes.push_back(activation);
  }
  return result;
}

}  // namespace gpipe::costs
