#include "train/train_plan.h"

#include <algorithm>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/errors.h"
#include "train/optimization.h"

namespace gpipe::train {

plan::PlanRequest plan_request(const TrainOptions& options) {
  plan::PlanRequest request;
  request.batch = options.batch_size;
  request.cores = hardware_threads();
  if (options.planning_cores > 0) request.cores = options.planning_cores;
  const auto& devices = options.shape.devices;
  const bool cuda = std::any_of(devices.begin(), devices.end(), [](const std::string& d) {
    return DeviceSpec::parse(d).is_cuda();
  });
  if (cuda) {
    request.devices = devices;
  } else if (!devices.empty()) {
    request.cores = static_cast<int64_t>(devices.size());
  }
  if (!options.memory_per_device.empty()) {
    request.memory_per_device =
        static_cast<double>(parse_bytes(options.memory_per_device, "--memory-per-device"));
  }
  return request;
}

plan::CostBook cost_book(const TrainOptions& options, const plan::PlanRequest& request,
                         const std::string& cache) {
  return plan::CostBook(options.model, make_optimizer_factory(options), cache, options.seed,
                        request.devices, options.shape.precision);
}

std::string nothing_fits(const plan::SearchResult& result, const plan::PlanRequest& request) {
  std::string message = "no plan fits --memory-per-device " +
                        format_bytes(request.memory_per_device) + " (" +
                        std::to_string(result.considered) + " considered)";
  if (result.smallest) {
    message += "; the smallest needs " + format_bytes(result.smallest->max_peak_bytes()) +
               " per device: " + result.smallest->shape.describe();
  }
  return message;
}

}  // namespace gpipe::train
