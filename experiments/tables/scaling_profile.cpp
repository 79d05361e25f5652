#include "tables/scaling_run.h"

#include "gpipe/errors.h"
#include "gpipe/timing.h"

namespace gpipe::tables::scaling {

RawProfile profile_layers(const ScalingRun& run, const ModelRun& mr, int64_t M) {
  const auto& options = run.options;
  const auto& model = mr.model;
  const auto& builder = mr.builder;
  const int64_t micro = model.batch / M;
  const auto t0 = std::chrono::steady_clock::now();
  spdlog::info("{}: profiling {} layers at micro-batch {} (M={})", model.label,
               builder->num_layers(), micro, M);
  const auto layers = builder->build();
  const costs::CpuMeter cpu;
  auto c = costs::measure_layer_costs(
      layers, builder->sample_batch(micro, /*seed=*/2), builder->loss(), run.profile_device,
      make_optimizer(mr.optimizer), ProfileOptions(options.profile).precision(options.precision));
  double forward = c.loss_forward_ms, backward = c.loss_backward_ms, update = 0;
  for (int64_t i = 0; i < c.num_layers(); ++i) {
    forward += c.forward_ms[i];
    backward += c.backward_ms[i];
    update += c.update_ms[i];
  }
  spdlog::info(
      "{}: micro-batch {}: forward {:.1f} ms, backward {:.1f} ms ({:.2f} ms "
      "per sample), update {:.1f} ms; profiled in {:.1f} s",
      model.label, micro, forward, backward, (forward + backward) / static_cast<double>(micro),
      update, elapsed_s(t0));
  const double other_cores = cpu.read().other_cores;
  warn_if_busy(c10::str(model.label, " profile at micro-batch ", micro), other_cores);
  return RawProfile{std::move(c), other_cores};
}

std::string costs_key(const ModelRun& mr, int64_t M) {
  return c10::str(model_key(mr.model), "/b", mr.model.batch / M);
}

const RawProfile& raw_at(ScalingRun& run, const ModelRun& mr, int64_t M) {
  const auto key = costs_key(mr, M);
  if (!run.raw_cache.count(key)) run.raw_cache[key] = profile_layers(run, mr, M);
  return run.raw_cache.at(key);
}

}  // namespace gpipe::tables::scaling
