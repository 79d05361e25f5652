#include "costs/projection.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include <c10/util/StringUtil.h>

#include "gpipe/errors.h"
#include "gpipe/partition.h"

namespace gpipe::costs {
namespace {

double total(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

double largest(const std::vector<double>& values) {
  return *std::max_element(values.begin(), values.end());
}

// Every stage at the stages' mean cost: the same work, perfectly balanced.
std::vector<double> flattened(const std::vector<double>& values) {
  if (values.empty()) return values;
  return std::vector<double>(values.size(), total(values) / static_cast<double>(values.size()));
}

// The layers per virtual stage `shape` is projected with (see project()).
std::vector<int64_t> stage_balance_of(const PipelineShape& shape, const LayerCosts& costs,
                                      const Schedule& schedule) {
  const int64_t stages = schedule.num_stages();
  const auto balance =
      shape.balance.empty() ? balance_by_time(costs, stages) : shape.stage_balance();
  GPIPE_CHECK(static_cast<int64_t>(balance.size()) == stages, ConfigError, "a balance of ",
              balance.size(), " stages was given for ", shape.describe(), ", which has ", stages,
              " (K x v); give one entry per virtual stage");
  return balance;
}

// The shares of the step `with_link` of `schedule` over `costs` (scaled) with `updates` per device:
// two more simulations, without the link and with every stage at the mean, split its idle time.
StepShares shares_of(const Schedule& schedule, const LayerCosts& costs,
                     const SimulationResult& with_link, Checkpoint checkpoint,
                     const std::vector<double>& updates, const StepProjection& p) {
  auto unlinked = stage_costs_ms(costs, p.stage_balance, link_preset("none"));
  const auto without_link = simulate(schedule, unlinked, checkpoint);
  for (auto* stages : {&unlinked.forward, &unlinked.backward, &unlinked.recompute,
                       &unlinked.checkpointed_forward, &unlinked.weight, &unlinked.fused_backward})
    *stages = flattened(*stages);
  const auto balanced = simulate(schedule, unlinked, checkpoint);

  StepShares out;
  double work = 0;
  for (const auto& e : with_link.events) {
    work_slot(out, e.name) += e.duration;
    work += e.duration;
  }
  const double k = static_cast<double>(schedule.devices);
  out.optimizer = total(updates);
  out.communication = k * (with_link.step_time - without_link.step_time + p.allreduce_ms);
  out.bubble = k * balanced.step_time - work;
  out.imbalance =
      k * (without_link.step_time - balanced.step_time) + (k * p.update_ms - total(updates));
  if (out.imbalance < 0) {  // an order fixed at unit costs can idle more on equal stages
    out.bubble += out.imbalance;
    out.imbalance = 0;
  }
  const double device_time = k * p.step_ms;
  for (double* share : share_slots(out))
    *share /= device_time;
  return out;
}

}  // namespace

LinkModel link_in_ms(const LinkModel& link_seconds, const LayerCosts& costs,
                     const std::vector<int64_t>& balance) {
  LinkModel link = link_seconds.in_milliseconds();
  link.boundary_bytes.clear();  // the boundaries of this balance
  int64_t end = 0;
  for (size_t s = 0; s + 1 < balance.size(); ++s) {
    end += balance[s];
    link.boundary_bytes.push_back(costs.output_bytes.at(end - 1));
  }
  return link;
}

SimulationCosts stage_costs_ms(const LayerCosts& costs, const std::vector<int64_t>& balance,
                               const LinkModel& link_seconds) {
  SimulationCosts sim;
  sim.forward = sum_by_stage(costs.forward_ms, balance);
  sim.backward = sum_by_stage(costs.backward_ms, balance);
  if (!costs.weight_ms.empty()) sim.weight = sum_by_stage(costs.weight_ms, balance);
  if (!costs.fused_backward_ms.empty())
    sim.fused_backward = sum_by_stage(costs.fused_backward_ms, balance);
  sim.recompute =
      costs.recompute_ms.empty() ? sim.forward : sum_by_stage(costs.recompute_ms, balance);
  if (!costs.no_grad_forward_ms.empty())
    sim.checkpointed_forward = sum_by_stage(costs.no_grad_forward_ms, balance);
  // The last stage computes the loss in every kind of forward, the replay included.
  for (auto* stages : {&sim.forward, &sim.recompute, &sim.checkpointed_forward}) {
    if (!stages->empty()) stages->back() += costs.loss_forward_ms;
  }
  for (auto* stages : {&sim.backward, &sim.fused_backward}) {
    if (!stages->empty()) stages->back() += costs.loss_backward_ms;
  }
  sim.link = link_in_ms(link_seconds, costs, balance);
  return sim;
}

double& work_slot(StepShares& shares, const std::string& action) {
  const char kind = action.front();
  return kind == 'F' ? shares.forward : kind == 'R' ? shares.recompute : shares.backward;
}

double StepShares::sum() const {
  double out = 0;
  for (const double* share : share_slots(*this))
    out += *share;
  return out;
}

std::string StepShares::largest_overhead() const {
  const std::array<std::pair<const char*, double>, 5> overheads{{{"recompute", recompute},
                                                                 {"bubble", bubble},
                                                                 {"imbalance", imbalance},
                                                                 {"communication", communication},
                                                                 {"optimizer", optimizer}}};
  return std::max_element(overheads.begin(), overheads.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

StepProjection project(const PipelineShape& shape, const LayerCosts& costs,
                       const LinkModel& link_seconds, const ProjectionOptions& options) {
  GPIPE_CHECK(shape.M >= 1, ConfigError, "M (micro-batches) must be >= 1, got ", shape.M);
  GPIPE_CHECK(shape.precision == costs.precision, ConfigError, "a ", to_string(shape.precision),
              " step cannot be projected from costs measured in ", to_string(costs.precision),
              "; profile the model in ", to_string(shape.precision));
  GPIPE_CHECK(shape.R == 1 || options.allreduce_ms(), ConfigError, "projecting ", shape.describe(),
              " needs the time of its all-reduce over R=", shape.R, " replicas");
  const auto schedule = shape.training_schedule();
  const auto scaled = scaled_compute(costs, options.calibration());
  StepProjection p;
  p.stage_balance = stage_balance_of(shape, costs, schedule);
  const auto linked = stage_costs_ms(scaled, p.stage_balance, link_seconds);
  const auto result = simulate(schedule, linked, shape.checkpoint);
  const auto updates = sum_per_device(schedule.stage_device, schedule.devices,
                                      sum_by_stage(scaled.update_ms, p.stage_balance));
  p.pipeline_ms = result.step_time;
  p.bubble_fraction = result.bubble_fraction;
  p.update_ms = largest(updates);
  if (shape.R > 1) {
    const auto parameter_bytes =
        sum_per_device(schedule.stage_device, schedule.devices,
                       sum_by_stage(costs.parameter_bytes, p.stage_balance));
    p.allreduce_ms = options.allreduce_ms()(largest(parameter_bytes));
  }
  p.step_ms = p.pipeline_ms + p.allreduce_ms + p.update_ms;
  if (options.breakdown()) {
    p.shares = shares_of(schedule, scaled, result, shape.checkpoint, updates, p);
  }
  return p;
}

PipelineShape gpipe_shape(int64_t K, int64_t M, Checkpoint checkpoint,
                          std::vector<int64_t> balance) {
  PipelineShape shape;
  shape.K = K;
  shape.M = M;
  shape.schedule = ScheduleKind::kGPipe;
  shape.v = 1;
  shape.checkpoint = checkpoint;
  shape.balance = Balance::per_device(std::move(balance));
  return shape;
}

double samples_per_second(int64_t batch, double step_ms) {
  GPIPE_CHECK(step_ms > 0, ConfigError, "a step time must be > 0 ms, got ", step_ms);
  return static_cast<double>(batch) * 1e3 / step_ms;
}

}  // namespace gpipe::costs
