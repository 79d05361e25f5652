#include "tables/memory_model.h"

#include "gpipe/errors.h"
#include "gpipe/partition.h"
#include "gpipe/profile.h"

namespace gpipe::tables {
namespace {

// Bytes of one micro-batch of the run, from bytes measured at the profile's micro-batch.
double microbatch_scale(const MemoryProfile& profile, const MemoryShape& shape) {
  GPIPE_CHECK(profile.microbatch >= 1, ConfigError, "the memory profile has no micro-batch size");
  GPIPE_CHECK(shape.batch >= 1 && shape.chunks >= 1 && shape.chunks <= shape.batch, ConfigError,
              "a step of N=", shape.batch, " in M=", shape.chunks,
              " micro-batches cannot run: need 1 <= M <= N");
  const double micro = static_cast<double>(shape.batch) / static_cast<double>(shape.chunks);
  return micro / static_cast<double>(profile.microbatch);
}

double state_factor(const MemoryShape& shape) {
  GPIPE_CHECK(shape.state_slots >= 0, ConfigError, "optimizer state slots must be >= 0, got ",
              shape.state_slots);
  return 2.0 + static_cast<double>(shape.state_slots);
}

}  // namespace

double MemoryProfile::total_parameter_bytes() const {
  double total = 0;
  for (double b : parameter_bytes)
    total += b;
  return total;
}

MemoryProfile profile_memory(const LayerList& layers, const models::SampleBatch& sample,
                             const DeviceSpec& device, int threads) {
  MemoryProfile profile;
  profile.microbatch = sample.input.size(0);
  const auto options = ProfileOptions().warmup(0).iterations(1).threads(threads);
  for (const auto& p : profile_layers(layers, {sample.input}, device, options)) {
    profile.parameter_bytes.push_back(static_cast<double>(p.parameter_bytes));
    profile.activation_bytes.push_back(static_cast<double>(p.activation_bytes));
  }
  DeviceWorker worker(device, threads);
  worker.run([&] {
    torch::NoGradGuard no_grad;
    Activations x = to_device({sample.input}, device.torch_device());
    for (const auto& layer : layers) {
      x = layer->forward(x);
      profile.output_bytes.push_back(static_cast<double>(nbytes(x)));
    }
  });
  return profile;
}

std::vector<double> layer_memory_costs(const MemoryProfile& profile, const MemoryShape& shape) {
  const double scale = microbatch_scale(profile, shape);
  const double factor = state_factor(shape);
  const double kept = shape.recompute ? 1.0 : static_cast<double>(shape.chunks);
  std::vector<double> costs;
  for (int64_t i = 0; i < profile.num_layers(); ++i) {
    costs.push_back(profile.parameter_bytes[i] * factor +
                    profile.activation_bytes[i] * scale * kept);
  }
  return costs;
}

std::vector<int64_t> balance_by_memory(const MemoryProfile& profile, const MemoryShape& shape,
                                       int64_t K) {
  GPIPE_CHECK(K >= 1 && K <= profile.num_layers(), ConfigError, "pipeline-", K, " needs at least ",
              K, " layers (one per stage) but the model has ", profile.num_layers());
  return balance_by_cost(layer_memory_costs(profile, shape), K);
}

std::vector<double> predict_stage_bytes(const MemoryProfile& profile,
                                        const std::vector<int64_t>& balance,
                                        const MemoryShape& shape) {
  const auto costs = layer_memory_costs(profile, shape);
  auto stages = stage_costs(costs, balance);
  if (shape.recompute) {
    const double scale = microbatch_scale(profile, shape);
    int64_t end = 0;
    for (size_t s = 0; s + 1 < balance.size(); ++s) {
      end += balance[s];
      stages[s] += static_cast<double>(shape.chunks) * profile.output_bytes.at(end - 1) * scale;
    }
  }
  return stages;
}

}  // namespace gpipe::tables
