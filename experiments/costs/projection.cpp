#include "costs/projection.h"

#include <algorithm>

#include "gpipe/errors.h"
#include "gpipe/partition.h"

namespace gpipe::costs {

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

Projection project_step(const LayerCosts& costs, int64_t K, int64_t M, Checkpoint checkpoint,
                        const LinkModel& link_seconds, std::vector<int64_t> balance) {
  GPIPE_CHECK(M >= 1, ConfigError, "M (micro-batches) must be >= 1, got ", M);
  Projection projection;
  projection.balance = balance.empty() ? balance_by_time(costs, K) : std::move(balance);
  GPIPE_CHECK(static_cast<int64_t>(projection.balance.size()) == K, ConfigError, "a balance of ",
              projection.balance.size(), " stages was given for K=", K);
  const auto sim_costs = stage_costs_ms(costs, projection.balance, link_seconds);
  const auto result = simulate(make_schedule(ScheduleKind::kGPipe, K, M), sim_costs, checkpoint);
  const auto updates = sum_by_stage(costs.update_ms, projection.balance);
  projection.pipeline_ms = result.step_time;
  projection.update_ms = *std::max_element(updates.begin(), updates.end());
  projection.step_ms = projection.pipeline_ms + projection.update_ms;
  projection.bubble_fraction = result.bubble_fraction;
  return projection;
}

double samples_per_second(int64_t batch, double step_ms) {
  GPIPE_CHECK(step_ms > 0, ConfigError, "a step time must be > 0 ms, got ", step_ms);
  return static_cast<double>(batch) * 1e3 / step_ms;
}

}  // namespace gpipe::costs
