#include "tables/scaling_run.h"

#include "costs/projection.h"
#include "tables/paper_figures.h"

namespace gpipe::tables::scaling {

PipelineShape table_shape(const ScalingOptions& options, int64_t K, int64_t M,
                          std::vector<int64_t> balance) {
  auto shape = costs::gpipe_shape(K, M, options.checkpoint, std::move(balance));
  shape.threads = 1;
  shape.precision = options.precision;
  return shape;
}

ScalingRow projected_row(ScalingRun& run, const ModelRun& mr, const Profiled& profiled, int64_t K,
                         int64_t M) {
  const auto shape = table_shape(run.options, K, M, costs::balance_by_time(profiled.costs, K));
  const auto projection =
      costs::project(shape, profiled.costs, mr.link.link,
                     costs::ProjectionOptions().calibration(profiled.calibration).breakdown(true));
  ScalingRow row;
  row.table = mr.table.id;
  row.model = mr.model.config.name();
  row.label = mr.model.label;
  row.K = K;
  row.M = M;
  row.batch = mr.model.batch;
  row.source = "projected";
  row.link = mr.table.link;
  row.step_ms = projection.step_ms;
  row.samples_per_s = costs::samples_per_second(mr.model.batch, projection.step_ms);
  row.bubble_fraction = projection.bubble_fraction;
  row.comm_fraction = projection.shares->communication;
  if (mr.table.id == "table2") {
    auto b = breakdown_of(shape, projection);
    b.model = row.model;
    run.result.breakdown.rows.push_back(b);
  }
  row.balance = shape.device_balance();
  row.other_cores = profiled.other_cores;
  row.calibration = profiled.calibration;
  row.paper_speedup = paper_speedup(mr.table.id, row.model, K, M);
  return row;
}

}  // namespace gpipe::tables::scaling
