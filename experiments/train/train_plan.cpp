#include "train/train_plan.h"

#include <algorithm>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "tables/report.h"
#include "train/optimization.h"

namespace gpipe::train {

plan::PlanRequest plan_request(const TrainOptions& options) {
  plan::PlanRequest request;
  request.batch = options.batch_size;
  request.cores = hardware_threads();
  const auto& devices = options.devices;
  if (!devices.empty() && std::all_of(devices.begin(), devices.end(), ::isdigit)) {
    request.cores = cli::parse_ints(devices, "--devices").at(0);
    GPIPE_CHECK(request.cores >= 1, ConfigError, "--devices ", devices, " must be >= 1");
  } else if (!devices.empty()) {
    const auto list = cli::parse_strings(devices);
    const bool cuda = std::any_of(list.begin(), list.end(), [](const std::string& d) {
      return DeviceSpec::parse(d).is_cuda();
    });
    if (cuda) {
      request.devices = list;
    } else {
      request.cores = static_cast<int64_t>(list.size());
    }
  }
  if (!options.memory_per_device.empty()) {
    request.memory_per_device =
        static_cast<double>(tables::parse_bytes(options.memory_per_device, "--memory-per-device"));
  }
  return request;
}

plan::CostBook cost_book(const TrainOptions& options, const plan::PlanRequest& request,
                         const std::string& cache) {
  return plan::CostBook(options.model, make_optimizer_factory(options), cache, options.seed,
                        request.devices);
}

void apply_plan(const plan::Plan& plan, const plan::PlanRequest& request, TrainOptions& options) {
  // Through the flags themselves, so the plan's printed command and --plan auto cannot differ.
  options.balance.clear();
  options.stage_balance.clear();
  options.devices.clear();
  CLI::App app;
  add_train_flags(app, options);
  auto flags = plan::train_flags(plan, request);
  std::reverse(flags.begin(), flags.end());
  app.parse(flags);
}

std::string nothing_fits(const plan::SearchResult& result, const plan::PlanRequest& request) {
  std::string message = "no plan fits --memory-per-device " +
                        tables::format_bytes(request.memory_per_device) + " (" +
                        std::to_string(result.considered) + " considered)";
  if (result.smallest) {
    message += "; the smallest needs " + tables::format_bytes(result.smallest->max_peak_bytes()) +
               " per device: " + result.smallest->shape.describe();
  }
  return message;
}

}  // namespace gpipe::train
