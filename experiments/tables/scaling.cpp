#include "tables/scaling.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "gpipe/errors.h"
#include "gpipe/simulator.h"
#include "gpipe/timing.h"
#include "tables/paper_figures.h"
#include "tables/projection.h"
#include "tables/report.h"
#include "tables/workload.h"

namespace gpipe::tables {
namespace {

std::string model_key(const ScalingModel& m) {
  return c10::str(models::to_json(m.config).dump(), "/N", m.batch);
}

std::vector<std::string> devices_for(const std::string& type, int64_t K) {
  std::vector<std::string> devices;
  for (int64_t i = 0; i < K; ++i)
    devices.push_back(c10::str(type, ":", i));
  return devices;
}

int64_t devices_present(const std::string& type) {
  if (type == "cuda") return static_cast<int64_t>(torch::cuda::device_count());
  return hardware_threads();
}

double elapsed_s(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void validate(const ScalingOptions& options) {
  GPIPE_CHECK(!options.tables.empty(), ConfigError, "no tables to make");
  GPIPE_CHECK(options.device_type == "cpu" || options.device_type == "cuda", ConfigError,
              "unknown device type '", options.device_type, "': expected cpu or cuda");
  GPIPE_CHECK(options.max_measured_k >= 0, ConfigError,
              "--max-measured-k must be >= 0 (0: the devices present), got ",
              options.max_measured_k);
  GPIPE_CHECK(options.warmup_steps >= 0 && options.timed_steps >= 1, ConfigError,
              "--warmup must be >= 0 and --steps >= 1, got ", options.warmup_steps, " and ",
              options.timed_steps);
  GPIPE_CHECK(options.check_rounds >= 1, ConfigError, "--check-rounds must be >= 1, got ",
              options.check_rounds);
  GPIPE_CHECK(options.warmup_steps + options.timed_steps >= 2, ConfigError,
              "--warmup plus --steps must be at least 2 (the first step creates optimizer state)");
  GPIPE_CHECK(!options.calibrate || (options.calibration_steps >= 1 &&
                                     options.warmup_steps + options.calibration_steps >= 2),
              ConfigError, "calibration needs at least one timed step and two in all, got ",
              options.calibration_steps, " after ", options.warmup_steps, " warm-up step(s)");
  for (const auto& table : options.tables) {
    GPIPE_CHECK(!table.models.empty(), ConfigError, table.id, " has no models (check --models)");
    check_table_link(table.link);
    const auto has = [](const std::vector<int64_t>& values, int64_t v) {
      return std::find(values.begin(), values.end(), v) != values.end();
    };
    GPIPE_CHECK(!table.partitions.empty() && !table.chunks.empty(), ConfigError, table.id,
                " needs at least one K and one M");
    for (int64_t K : table.partitions) {
      GPIPE_CHECK(K >= 1, ConfigError, table.id, ": K=", K, " must be >= 1");
    }
    GPIPE_CHECK(has(table.partitions, table.base_K) && has(table.chunks, table.base_M), ConfigError,
                table.id, " normalises to K=", table.base_K, ", M=", table.base_M,
                ", so its K list must include ", table.base_K, " and its M list ", table.base_M);
    for (const auto& model : table.models) {
      GPIPE_CHECK(model.batch >= 1, ConfigError, model.label, ": the mini-batch N must be >= 1");
      const int64_t layers = models::make_model(model.config)->num_layers();
      for (int64_t K : table.partitions) {
        GPIPE_CHECK(K <= layers, ConfigError, table.id, ": K=", K, " is larger than the ", layers,
                    " layers of ", model.label, "; a stage needs at least one layer, so use ",
                    "K <= ", layers, " or a deeper model");
      }
      for (int64_t M : table.chunks) {
        GPIPE_CHECK(M >= 1 && M <= model.batch && model.batch % M == 0, ConfigError, table.id,
                    ": M=", M, " must divide the mini-batch N=", model.batch, " of ", model.label,
                    " (equal micro-batches of N/M samples)");
      }
    }
  }
}

void normalise(std::vector<ScalingRow>& rows, const std::string& table, int64_t base_K,
               int64_t base_M) {
  std::map<std::pair<std::string, std::string>, double> baseline;
  std::set<std::string> models;
  for (const auto& row : rows) {
    if (row.table != table) continue;
    models.insert(row.model);
    if (row.K == base_K && row.M == base_M) baseline[{row.model, row.source}] = row.samples_per_s;
  }
  for (const auto& model : models) {
    bool any = false;
    for (const auto& [key, value] : baseline)
      any = any || (key.first == model && value > 0);
    GPIPE_CHECK(any, ConfigError, table, ": ", model, " has no row at the baseline K=", base_K,
                ", M=", base_M, " to normalise by");
  }
  for (auto& row : rows) {
    if (row.table != table) continue;
    const auto it = baseline.find({row.model, row.source});
    if (it == baseline.end() || it->second <= 0) {
      row.speedup.reset();
    } else {
      row.speedup = row.samples_per_s / it->second;
    }
  }
}

ScalingResult run_scaling(const ScalingOptions& options) {
  validate(options);
  const auto started = std::chrono::steady_clock::now();
  ScalingResult result;
  result.options = options;
  const int64_t present = devices_present(options.device_type);
  result.max_measured_k = options.max_measured_k > 0 ? options.max_measured_k : present;
  GPIPE_CHECK(result.max_measured_k <= present, ConfigError, "--max-measured-k ",
              result.max_measured_k, " is more than the ", present, " ", options.device_type,
              " devices this machine has");
  result.machine = {{"hardware_threads", hardware_threads()},
                    {"device_type", options.device_type},
                    {"devices_present", present},
                    {"physical_memory_bytes", physical_memory_bytes()},
                    {"load_average_before", load_average()}};
  const auto& load = result.machine["load_average_before"];
  if (load.is_array() && load[0].get<double>() > 0.5) {
    spdlog::warn(
        "the load average is {:.2f}: other work shares these cores, so steps measured on "
        "several devices at once run slower than this machine can (the one-thread "
        "profiles behind the projections suffer less); rerun on an idle machine",
        load[0].get<double>());
  }
  const DeviceSpec profile_device = DeviceSpec::parse(options.device_type + ":0");
  const int64_t memory = physical_memory_bytes();

  double machine_flops = 0;
  for (const auto& table : options.tables) {
    if (is_scaled_link(table.link) && machine_flops == 0) {
      machine_flops = measure_gemm_flops(profile_device, options.profile.threads());
      result.machine["gemm_flops"] = machine_flops;
      result.machine["gemm_threads"] = options.profile.threads();
    }
    const auto link = table_link(table.link, machine_flops);
    result.links[table.id] = link;
    if (link.scaled()) {
      spdlog::info(
          "{} link {}: {} does {:.1f} GFLOP/s ({} thread(s) on a CPU), {:.3g} of a {}, so the "
          "link gets {:.3g} MB/s and {:.3g} ms a message",
          table.id, link.name, profile_device.str(), machine_flops / 1e9, options.profile.threads(),
          link.factor, link.accelerator, link.link.bandwidth / 1e6, link.link.latency * 1e3);
    }
  }

  // Per model and micro-batch: the (calibrated) layer costs, who else used the CPU while they
  // were profiled, and the calibration.
  struct Profiled {
    LayerCosts costs;
    double other_cores = 0;
    double calibration = 1;
  };
  std::map<std::string, Profiled> costs_cache;
  auto warn_if_busy = [](const std::string& what, double other_cores) {
    if (other_cores > 0.25) {
      spdlog::warn(
          "{}: other processes kept {:.2f} cores busy meanwhile; its timing is slower "
          "than this machine can do",
          what, other_cores);
    }
  };
  std::map<std::string, TrainingMeasurement> measured_cache;
  std::set<std::string> checked;
  // Per measured run: each check round's projected and measured samples/s and calibration.
  std::map<std::string, std::vector<std::tuple<double, double, double>>> check_rounds;
  for (const auto& table : options.tables) {
    const auto& link = result.links.at(table.id);
    for (const auto& model : table.models) {
      const auto builder = models::make_model(model.config);
      const std::string optimizer = resolve_optimizer(options.optimizer, model.config.name());
      const int64_t parameters = builder->count_parameters();
      // Parameters, gradients and optimizer state of the whole model, for the measured runs.
      const int64_t state_bytes = parameters * bytes_per_parameter(optimizer);
      const bool can_measure = memory == 0 || state_bytes < memory * 6 / 10;
      if (!can_measure) {
        spdlog::warn(
            "{}: {} of parameters, gradients and {} state is more than this machine's "
            "memory allows ({}); its rows are projected only",
            model.label, format_bytes(static_cast<double>(state_bytes)), optimizer,
            format_bytes(static_cast<double>(memory)));
      }
      const auto full_batch = builder->sample_batch(model.batch, /*seed=*/1);
      for (int64_t M : table.chunks) {
        const int64_t micro = model.batch / M;
        const std::string costs_key = c10::str(model_key(model), "/b", micro);
        // Profiles every layer at this micro-batch (logged with who else used the CPU), then
        // calibrates the costs by a one-device step where the model can be measured.
        auto profile = [&] {
          const auto t0 = std::chrono::steady_clock::now();
          spdlog::info("{}: profiling {} layers at micro-batch {} (M={})", model.label,
                       builder->num_layers(), micro, M);
          const auto layers = builder->build();
          const CpuMeter cpu;
          auto c =
              measure_layer_costs(layers, builder->sample_batch(micro, /*seed=*/2), builder->loss(),
                                  profile_device, make_optimizer(optimizer), options.profile);
          double forward = c.loss_forward_ms, backward = c.loss_backward_ms, update = 0;
          for (int64_t i = 0; i < c.num_layers(); ++i) {
            forward += c.forward_ms[i];
            backward += c.backward_ms[i];
            update += c.update_ms[i];
          }
          spdlog::info(
              "{}: micro-batch {}: forward {:.1f} ms, backward {:.1f} ms ({:.2f} ms "
              "per sample), update {:.1f} ms; profiled in {:.1f} s",
              model.label, micro, forward, backward,
              (forward + backward) / static_cast<double>(micro), update, elapsed_s(t0));
          const double other_cores = cpu.read().other_cores;
          warn_if_busy(c10::str(model.label, " profile at micro-batch ", micro), other_cores);
          if (!options.calibrate || !can_measure) return Profiled{std::move(c), other_cores, 1.0};
          const auto t1 = std::chrono::steady_clock::now();
          const auto calibration = calibrate_one_device(
              *builder, full_batch, c, M, options.checkpoint, options.device_type + ":0", optimizer,
              options.warmup_steps, options.calibration_steps);
          spdlog::info(
              "{}: calibration at M={}: a one-device step took {:.1f} ms, its projection "
              "{:.1f} ms, so the projections' compute costs are scaled by {:.3f} ({:.1f} s)",
              model.label, M, calibration.measured_ms, calibration.projected_ms,
              calibration.ratio(), elapsed_s(t1));
          return Profiled{scaled_compute(std::move(c), calibration.ratio()), other_cores,
                          calibration.ratio()};
        };
        if (!costs_cache.count(costs_key)) costs_cache[costs_key] = profile();
        const auto& profiled = costs_cache.at(costs_key);
        const auto& costs = profiled.costs;
        for (int64_t K : table.partitions) {
          const auto balance = balance_by_time(costs, K);
          const auto projection = project_step(costs, K, M, options.checkpoint, link.link, balance);
          const auto unlinked =
              project_step(costs, K, M, options.checkpoint, link_preset("none"), balance);
          ScalingRow row;
          row.table = table.id;
          row.model = model.config.name();
          row.label = model.label;
          row.K = K;
          row.M = M;
          row.batch = model.batch;
          row.source = "projected";
          row.link = table.link;
          row.step_ms = projection.step_ms;
          row.samples_per_s = samples_per_second(model.batch, projection.step_ms);
          row.bubble_fraction = projection.bubble_fraction;
          row.comm_fraction = 1.0 - unlinked.step_ms / projection.step_ms;
          const bool breakdown = table.id == "table2";
          if (breakdown) {
            auto b = simulated_breakdown(costs, K, M, options.checkpoint, link.link, balance);
            b.model = row.model;
            result.breakdown.rows.push_back(b);
          }
          row.balance = balance;
          row.other_cores = profiled.other_cores;
          row.calibration = profiled.calibration;
          row.paper_speedup = paper_speedup(table.id, row.model, K, M);
          result.rows.push_back(row);
          if (K > result.max_measured_k || !can_measure) continue;

          // Under a scaled link a run on CPU virtual devices imposes it (they otherwise share
          // memory); real devices have their own link.
          const bool impose = link.scaled() && options.device_type == "cpu";
          const std::string measured_link = impose                         ? link.name
                                            : options.device_type == "cpu" ? "none"
                                                                           : "device";
          const std::string run_key =
              c10::str(model_key(model), "/K", K, "/M", M, "/", measured_link);
          const auto& local_link = impose ? link.link : link_preset("none");
          if (!measured_cache.count(run_key)) {
            // With check rounds, each round profiles (and calibrates) afresh right before its
            // measurement.
            auto& rounds = check_rounds[run_key];
            for (int r = 0; r < options.check_rounds; ++r) {
              const auto fresh = options.check_rounds > 1 ? profile() : profiled;
              const auto t0 = std::chrono::steady_clock::now();
              spdlog::info("{}: measuring K={} M={} (balance {}) on {} {} devices, link {}{}",
                           model.label, K, M, c10::Join(",", balance), K, options.device_type,
                           measured_link,
                           options.check_rounds > 1
                               ? c10::str(", round ", r + 1, " of ", options.check_rounds)
                               : "");
              RunShape shape;
              shape.balance = balance;
              shape.devices = devices_for(options.device_type, K);
              shape.chunks = M;
              shape.checkpoint = options.checkpoint;
              shape.threads_per_device = 1;
              if (impose) shape.link = link.link;
              auto m = measure_training(*builder, full_batch, shape, optimizer,
                                        options.warmup_steps, options.timed_steps);
              spdlog::info(
                  "{}: K={} M={}: {:.1f} ms per step, {:.2f} cores busy (measured in {:.1f} "
                  "s)",
                  model.label, K, M, m.median_step_ms, m.cpu.own_cores, elapsed_s(t0));
              warn_if_busy(c10::str(model.label, " K=", K, " M=", M), m.cpu.other_cores);
              const auto projected =
                  project_step(fresh.costs, K, M, options.checkpoint, local_link, balance);
              rounds.push_back({samples_per_second(model.batch, projected.step_ms),
                                samples_per_second(model.batch, m.median_step_ms),
                                fresh.calibration});
              if (r == 0) measured_cache[run_key] = std::move(m);
            }
          }
          const auto& measured = measured_cache.at(run_key);
          ScalingRow mrow = row;
          mrow.source = "measured";
          mrow.link = measured_link;
          mrow.step_ms = measured.median_step_ms;
          mrow.samples_per_s = samples_per_second(model.batch, measured.median_step_ms);
          mrow.bubble_fraction.reset();
          mrow.other_cores = measured.cpu.other_cores;
          result.rows.push_back(mrow);
          if (breakdown) {
            auto b = simulated_breakdown(costs, K, M, options.checkpoint,
                                         impose ? link.link : link_preset("none"), balance);
            b.model = row.model;
            result.breakdown.rows.push_back(
                measured_breakdown(measured.last_step_events, measured.step_ms.back(), b));
          }
          if (checked.insert(run_key).second) {
            // The projection on the link the run had: the scaled one, or none (CPU virtual
            // devices share memory).
            ProjectionCheck check;
            check.model = row.model;
            check.label = row.label;
            check.K = K;
            check.M = M;
            check.link = measured_link;
            std::vector<double> projected, measured_rate;
            for (const auto& [p, m, calibration] : check_rounds.at(run_key)) {
              projected.push_back(p);
              measured_rate.push_back(m);
              check.round_errors.push_back(p / m - 1.0);
              check.round_calibrations.push_back(calibration);
            }
            check.measured_samples_per_s = median(measured_rate);
            check.projected_samples_per_s = median(projected);
            check.other_cores_measured = mrow.other_cores;
            check.other_cores_profiled = row.other_cores;
            result.checks.push_back(check);
          }
        }
      }
    }
    normalise(result.rows, table.id, table.base_K, table.base_M);
  }
  result.machine["load_average_after"] = load_average();
  result.seconds = elapsed_s(started);
  result.breakdown.preset = options.preset;
  result.breakdown.checkpoint = to_string(options.checkpoint);
  result.breakdown.machine = result.machine;
  result.breakdown.seconds = result.seconds;
  for (const auto& table : options.tables) {
    if (table.id == "table2") result.breakdown.link = table.link;
  }
  for (auto& b : result.breakdown.rows) {
    const std::string source = b.source == "simulated" ? "projected" : "measured";
    for (const auto& r : result.rows) {
      if (r.table == "table2" && r.model == b.model && r.K == b.K && r.M == b.M &&
          r.source == source) {
        b.speedup = r.speedup;
      }
    }
  }
  return result;
}

}  // namespace gpipe::tables
