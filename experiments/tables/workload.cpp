#include "tables/workload.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "gpipe/errors.h"
#include "gpipe/memory.h"

namespace gpipe::tables {

std::string default_optimizer(const std::string& model) {
  return model == "amoebanet-d" || model == "amoebanet-b" ? "rmsprop" : "adam";
}

std::string resolve_optimizer(const std::string& name, const std::string& model) {
  if (name == "auto") return default_optimizer(model);
  GPIPE_CHECK(name == "rmsprop" || name == "adam" || name == "sgd", ConfigError,
              "unknown optimizer '", name, "': expected rmsprop, adam, sgd or auto");
  return name;
}

int64_t optimizer_state_slots(const std::string& name) {
  if (name == "rmsprop") return 1;
  if (name == "adam") return 2;
  if (name == "sgd") return 0;
  throw ConfigError(c10::str("unknown optimizer '", name, "': expected rmsprop, adam or sgd"));
}

Pipeline::OptimizerFactory make_optimizer(const std::string& name) {
  optimizer_state_slots(name);  // validates the name
  return [name](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    if (name == "rmsprop") {
      return std::make_unique<torch::optim::RMSprop>(params,
                                                     torch::optim::RMSpropOptions(1e-4).alpha(0.9));
    }
    if (name == "adam") {
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-4));
    }
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(1e-3));
  };
}

TrainingMeasurement measure_training(const models::ModelBuilder& builder,
                                     const models::SampleBatch& batch, const RunShape& shape,
                                     const std::string& optimizer, int warmup, int steps,
                                     uint64_t seed) {
  GPIPE_CHECK(warmup >= 0 && steps >= 1, ConfigError,
              "measuring needs warmup >= 0 and steps >= 1, got ", warmup, " and ", steps);
  GPIPE_CHECK(warmup + steps >= 2, ConfigError,
              "measuring needs at least two steps in all (the first creates the optimizer state)");
  PipelineOptions options(shape.balance);
  options.chunks(shape.chunks)
      .checkpoint(shape.checkpoint)
      .threads_per_device(shape.threads_per_device)
      .seed(seed);
  if (!shape.devices.empty()) options.devices(shape.devices);
  Pipeline pipeline(builder.build(), options, builder.loss());
  pipeline.set_optimizer(make_optimizer(optimizer));

  TrainingMeasurement result;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    result.loss = pipeline.train_step(batch.input, batch.target);
    for (const auto& device : pipeline.devices()) {
      if (device.is_cuda()) torch::cuda::synchronize(device.index);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i >= warmup) result.step_ms.push_back(ms);
  }
  auto sorted = result.step_ms;
  std::sort(sorted.begin(), sorted.end());
  result.median_step_ms = sorted[sorted.size() / 2];

  // The pipeline reset each device's peak when the last step began and nothing reset it since,
  // so the meter's peak now covers that whole step, optimizer update included.
  const auto& last = pipeline.last_step();
  for (size_t s = 0; s < pipeline.devices().size(); ++s) {
    const int64_t window_peak = last.peak_bytes.at(s);
    const int64_t activation = last.peak_activation_bytes.at(s);
    const int64_t whole_step = memory::stats(pipeline.devices()[s]).peak_bytes;
    result.peak_bytes.push_back(std::max(window_peak, whole_step));
    result.state_bytes.push_back(window_peak - activation);
    result.peak_activation_bytes.push_back(activation);
  }
  return result;
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace gpipe::tables
