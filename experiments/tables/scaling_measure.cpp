#include "tables/scaling_run.h"

#include "costs/projection.h"
#include "gpipe/errors.h"
#include "tables/workload.h"

namespace gpipe::tables::scaling {

namespace {

// The link a measured run has. Under a scaled link a run on CPU virtual devices imposes it
// (they otherwise share memory); real devices have their own link.
struct MeasuredLink {
  bool impose = false;
  std::string name;  // the scaled link's name, "none" (CPU virtual devices) or "device"
  LinkModel local;   // what its projection assumes: the imposed link, or none
};

MeasuredLink measured_link_for(const ScalingOptions& options, const TableLink& link) {
  MeasuredLink out;
  out.impose = link.scaled() && options.device_type == "cpu";
  out.name = out.impose ? link.name : options.device_type == "cpu" ? "none" : "device";
  out.local = out.impose ? link.link : link_preset("none");
  return out;
}

// One measured run of `row`'s K, M and balance on K devices (round r of the check rounds).
costs::TrainingMeasurement measure_once(const ScalingRun& run, const ModelRun& mr,
                                        const ScalingRow& row, const MeasuredLink& measured_link,
                                        int r) {
  const auto& options = run.options;
  const auto& model = mr.model;
  const int64_t K = row.K, M = row.M;
  const auto t0 = std::chrono::steady_clock::now();
  spdlog::info(
      "{}: measuring K={} M={} (balance {}) on {} {} devices, link {}{}", model.label, K, M,
      c10::Join(",", row.balance), K, options.device_type, measured_link.name,
      options.check_rounds > 1 ? c10::str(", round ", r + 1, " of ", options.check_rounds) : "");
  auto shape = table_shape(options, K, M, row.balance);
  shape.devices = devices_for(options.device_type, K);
  auto m = costs::measure_training(*mr.builder, mr.full_batch, shape, make_optimizer(mr.optimizer),
                                   options.warmup_steps, options.timed_steps, /*seed=*/1,
                                   measured_link.impose ? mr.link.link : LinkModel{});
  spdlog::info(
      "{}: K={} M={}: {:.1f} ms per step, {:.2f} cores busy (measured in {:.1f} "
      "s)",
      model.label, K, M, m.median_step_ms, m.cpu.own_cores, elapsed_s(t0));
  warn_if_busy(c10::str(model.label, " K=", K, " M=", M), m.cpu.other_cores);
  return m;
}

// Measures `row`'s run for every check round, keeping round 0's measurement under `run_key`
// and every round's projected and measured samples/s. With check rounds, each round profiles
// (and calibrates) afresh right before its measurement.
void measure_rounds(ScalingRun& run, const ModelRun& mr, const Profiled& profiled,
                    const ScalingRow& row, const MeasuredLink& measured_link,
                    const std::string& run_key) {
  const auto& options = run.options;
  auto& rounds = run.check_rounds[run_key];
  for (int r = 0; r < options.check_rounds; ++r) {
    const auto fresh = options.check_rounds > 1 ? paired_profile(run, mr, row.M, row.K) : profiled;
    auto m = measure_once(run, mr, row, measured_link, r);
    const auto shape = table_shape(options, row.K, row.M, row.balance);
    auto project = [&](double calibration) {
      return costs::project(shape, fresh.costs, measured_link.local,
                            costs::ProjectionOptions().calibration(calibration));
    };
    auto projected = project(fresh.calibration);
    double calibration = fresh.calibration;
    if (fresh.contended > 0) {  // the one-device projection's bubble says when all K work
      calibration = costs::contended_calibration(fresh.calibration, fresh.contended,
                                                 projected.bubble_fraction, row.K);
      projected = project(calibration);
    }
    rounds.push_back({costs::samples_per_second(mr.model.batch, projected.step_ms),
                      costs::samples_per_second(mr.model.batch, m.median_step_ms), calibration});
    if (r == 0) run.measured_cache[run_key] = std::move(m);
  }
}

// The projection check of a measured run against its projected twin `row`: the medians over
// the rounds, each round's error and calibration. The projection is on the link the run had:
// the scaled one, or none (CPU virtual devices share memory).
ProjectionCheck projection_check(const ScalingRow& row, const ScalingRow& mrow,
                                 const CheckRounds& rounds) {
  ProjectionCheck check;
  check.model = row.model;
  check.label = row.label;
  check.K = row.K;
  check.M = row.M;
  check.link = mrow.link;
  std::vector<double> projected, measured_rate;
  for (const auto& [p, m, calibration] : rounds) {
    projected.push_back(p);
    measured_rate.push_back(m);
    check.round_errors.push_back(p / m - 1.0);
    check.round_calibrations.push_back(calibration);
  }
  check.measured_samples_per_s = median(measured_rate);
  check.projected_samples_per_s = median(projected);
  check.other_cores_measured = mrow.other_cores;
  check.other_cores_profiled = row.other_cores;
  return check;
}

}  // namespace

void add_measured_row(ScalingRun& run, const ModelRun& mr, const Profiled& profiled,
                      const ScalingRow& row) {
  const auto& options = run.options;
  const auto measured_link = measured_link_for(options, mr.link);
  const std::string run_key =
      c10::str(model_key(mr.model), "/K", row.K, "/M", row.M, "/", measured_link.name);
  if (!run.measured_cache.count(run_key)) {
    measure_rounds(run, mr, profiled, row, measured_link, run_key);
  }
  const auto& measured = run.measured_cache.at(run_key);
  ScalingRow mrow = row;
  mrow.source = "measured";
  mrow.link = measured_link.name;
  mrow.step_ms = measured.median_step_ms;
  mrow.samples_per_s = costs::samples_per_second(mr.model.batch, measured.median_step_ms);
  mrow.bubble_fraction.reset();
  mrow.other_cores = measured.cpu.other_cores;
  run.result.rows.push_back(mrow);
  if (mr.table.id == "table2") {
    const auto shape = table_shape(options, row.K, row.M, row.balance);
    auto b = breakdown_of(
        shape, costs::project(
                   shape, profiled.costs, measured_link.local,
                   costs::ProjectionOptions().calibration(profiled.calibration).breakdown(true)));
    b.model = row.model;
    run.result.breakdown.rows.push_back(
        measured_breakdown(measured.last_step_events, measured.step_ms.back(), b));
  }
  if (run.checked.insert(run_key).second) {
    run.result.checks.push_back(projection_check(row, mrow, run.check_rounds.at(run_key)));
  }
}

}  // namespace gpipe::tables::scaling
