#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "costs/memory.h"
#include "costs/projection.h"
#include "gpipe/errors.h"
#include "gpipe/partition.h"

namespace gpipe::plan {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// Candidate stage balances: exact min-max partitions by time, by memory (memory.h:
// layer_memory_bytes with `kept_microbatches` micro-batches of activations) and by blends of the
// two.
std::vector<std::vector<int64_t>> candidate_balances(const costs::LayerCosts& costs, int64_t stages,
                                                     int64_t state_slots,
                                                     double kept_microbatches) {
  const int64_t n = costs.num_layers();
  const auto memory = costs::layer_memory_bytes(costs, state_slots, kept_microbatches);
  std::vector<double> time(n);
  double total_time = 0, total_memory = 0;
  for (int64_t i = 0; i < n; ++i) {
    time[i] = costs.forward_ms[i] + costs.backward_ms[i];
    total_time += time[i];
    total_memory += memory[i];
  }
  std::set<std::vector<int64_t>> unique;
  for (double lambda : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    std::vector<double> blend(n);
    for (int64_t i = 0; i < n; ++i) {
      blend[i] = (1 - lambda) * time[i] / std::max(total_time, 1e-12) +
                 lambda * memory[i] / std::max(total_memory, 1e-12);
    }
    unique.insert(balance_by_cost(blend, stages));
  }
  return {unique.begin(), unique.end()};
}

// The samples of one micro-batch of `shape`: the batch split over R replicas and M micro-batches.
int64_t microbatch(const PlanRequest& request, const PipelineShape& shape) {
  GPIPE_CHECK(shape.R >= 1 && shape.M >= 1 && request.batch % (shape.R * shape.M) == 0, ConfigError,
              shape.describe(), ": R x M = ", shape.R * shape.M, " does not divide the batch of ",
              request.batch, "; pick an M that divides the batch of each replica (",
              request.batch / shape.R, ")");
  return request.batch / shape.R / shape.M;
}

// The schedules worth trying at K devices and M micro-batches of a model of `num_layers`
// layers, each with its v: every kind (or the request's only one) whose shape rules K and M
// meet and whose K x v stages each get a layer; with one device every kind is gpipe. A schedule
// file's program runs only at its own K and M.
std::vector<std::pair<ScheduleKind, int64_t>> candidate_schedules(const PlanRequest& request,
                                                                  int64_t K, int64_t M,
                                                                  int64_t num_layers) {
  const auto& only = request.schedule;
  if (only && only->program) {
    const auto& p = *only->program;
    if (K != p.devices || M != p.microbatches || K * p.virtual_stages > num_layers) return {};
    return {{ScheduleKind::kCustom, p.virtual_stages}};
  }
  if (K == 1 && !only) return {{ScheduleKind::kGPipe, 1}};
  std::vector<std::pair<ScheduleKind, int64_t>> schedules;
  for (auto kind : all_schedule_kinds()) {
    if (only && kind != only->schedule) continue;
    const int64_t v = default_virtual_stages(kind);
    if (K * v <= num_layers && schedule_shape_error(kind, K, M, v).empty()) {
      schedules.push_back({kind, v});
    }
  }
  return schedules;
}

}  // namespace

double Plan::max_peak_bytes() const {
  return peak_bytes.empty() ? 0 : *std::max_element(peak_bytes.begin(), peak_bytes.end());
}

std::vector<PipelineShape> candidate_shapes(const PlanRequest& request, int64_t num_layers) {
  GPIPE_CHECK(request.batch >= 1, ConfigError, "--batch-size must be >= 1, got ", request.batch);
  GPIPE_CHECK(request.cores >= 1, ConfigError, "planning needs at least one device, got ",
              request.cores);
  const bool cpu = request.devices.empty();
  const int64_t n = cpu ? request.cores : static_cast<int64_t>(request.devices.size());
  std::vector<PipelineShape> shapes;
  for (int64_t K = 1; K <= std::min(n, num_layers); ++K) {
    for (int64_t R = 1; K * R <= n; ++R) {
      // Accelerators: every device is used (K x R = n). CPU cores: K x R workers share them.
      if (!cpu && K * R != n) continue;
      if (request.max_replicas > 0 && R > request.max_replicas) continue;
      if (request.batch % R != 0) continue;
      const int threads = cpu ? static_cast<int>(n / (K * R)) : 1;
      for (int64_t M : divisors(request.batch / R)) {
        if (M > request.max_chunks) continue;
        for (const auto& [kind, v] : candidate_schedules(request, K, M, num_layers)) {
          for (auto checkpoint :
               {Checkpoint::kNever, Checkpoint::kExceptLast, Checkpoint::kAlways}) {
            // With one micro-batch, except_last checkpoints nothing: it is `never`.
            if (M == 1 && checkpoint == Checkpoint::kExceptLast) continue;
            PipelineShape shape;
            shape.K = K;
            shape.R = R;
            shape.M = M;
            shape.schedule = kind;
            shape.v = v;
            if (kind == ScheduleKind::kCustom) {
              shape.program = request.schedule->program;
              shape.schedule_file = request.schedule->schedule_file;
            }
            shape.checkpoint = checkpoint;
            shape.threads = threads;
            shapes.push_back(shape);
          }
        }
      }
    }
  }
  return shapes;
}

costs::CalibrationKey calibration_key(const CostBook& book, const PlanRequest& request,
                                      const PipelineShape& shape) {
  return book.calibration_key(microbatch(request, shape), shape.threads, shape.K, shape.R, shape.M,
                              shape.checkpoint, costs::schedule_family(shape.training_schedule()));
}

Plan predict(CostBook& book, const PlanRequest& request, const PipelineShape& shape,
             const std::vector<int64_t>& stage_balance) {
  // Isolated layer costs scaled to what real steps through the engine take, R replicas at once
  // (cost_book.h).
  return predict(book, request, shape, stage_balance,
                 book.calibration(calibration_key(book, request, shape)));
}

namespace {

// The shape a plan of `shape` runs: cut by `stage_balance`, in the book's precision (so a verify
// measures what the costs describe), on the request's first K devices.
PipelineShape planned_shape(const CostBook& book, const PlanRequest& request,
                            const PipelineShape& shape, const std::vector<int64_t>& stage_balance) {
  PipelineShape out = shape;
  set_stage_balance(out, stage_balance);
  out.precision = book.precision();
  out.devices.clear();
  for (int64_t d = 0; d < shape.K && !request.devices.empty(); ++d)
    out.devices.push_back(request.devices[d]);
  return out;
}

// The step of a planned shape projected over the book's costs at `calibration`: the gradient
// all-reduce of R replicas timed on this machine (CostBook::allreduce_ms) or a ring at the
// request's bandwidth (2 (R-1)/R x bytes over it).
costs::StepProjection projection(CostBook& book, const PlanRequest& request,
                                 const PipelineShape& planned, double calibration, bool breakdown) {
  const auto& costs = book.at(microbatch(request, planned), planned.threads).layers;
  const double gbs = request.allreduce_gbs;
  const int64_t K = planned.K, R = planned.R;
  const auto allreduce = [&book, gbs, K, R](double bytes) {
    const double r = static_cast<double>(R);
    return gbs > 0 ? 2 * (r - 1) / r * bytes / (gbs * 1e9) * 1e3 : book.allreduce_ms(K, R, bytes);
  };
  return costs::project(planned, costs, link_preset(request.link),
                        costs::ProjectionOptions()
                            .calibration(calibration)
                            .breakdown(breakdown)
                            .allreduce_ms(allreduce));
}

}  // namespace

Plan predict(CostBook& book, const PlanRequest& request, const PipelineShape& shape,
             const std::vector<int64_t>& stage_balance, double slowdown) {
  Plan plan;
  plan.shape = planned_shape(book, request, shape, stage_balance);
  const auto p = projection(book, request, plan.shape, slowdown, /*breakdown=*/false);
  plan.calibration = slowdown;
  plan.pipeline_ms = p.pipeline_ms;
  plan.bubble_fraction = p.bubble_fraction;
  plan.update_ms = p.update_ms;
  plan.allreduce_ms = p.allreduce_ms;
  plan.step_ms = p.step_ms;
  plan.samples_per_s = costs::samples_per_second(request.batch, plan.step_ms);
  const auto& costs = book.at(microbatch(request, shape), shape.threads).layers;
  plan.peak_bytes = costs::predict_peak_bytes(costs, shape.training_schedule(), stage_balance,
                                              shape.checkpoint, book.state_slots());
  return plan;
}

costs::StepProjection explain(CostBook& book, const PlanRequest& request, const Plan& plan) {
  return projection(book, request, plan.shape, plan.calibration, /*breakdown=*/true);
}

Plan predict(CostBook& book, const PlanRequest& request, const PipelineShape& shape) {
  const auto& costs = book.at(microbatch(request, shape), shape.threads).layers;
  const double kept = costs::kept_microbatches(shape.training_schedule(), shape.checkpoint);
  std::optional<Plan> fastest, smallest;
  for (const auto& balance :
       candidate_balances(costs, shape.K * shape.v, book.state_slots(), kept)) {
    auto plan = predict(book, request, shape, balance);
    const bool fits =
        request.memory_per_device <= 0 || plan.max_peak_bytes() <= request.memory_per_device;
    if (fits && (!fastest || plan.step_ms < fastest->step_ms)) fastest = plan;
    if (!smallest || plan.max_peak_bytes() < smallest->max_peak_bytes()) smallest = plan;
  }
  return fastest ? *fastest : *smallest;
}

namespace {

// Plans predicted within this factor of the fastest have their calibrations measured in rounds,
// at most this many calibrations (the fastest plans' first): a calibration takes a second or two
// of a Transformer's steps, and planning should stay within a minute.
constexpr double kContenderSlack = 1.25;
constexpr size_t kMaxContenders = 6;
// Searches again after the contenders' rounds at most this many times (see search()).
constexpr int kMaxRoundPasses = 4;
// Extra rounds (PlanRequest::calibration_extra_rounds) go to the calibrations that decide the
// closest contest only: those of the plans within this factor of the fastest, at most this many.
constexpr double kCloseSlack = 1.10;
constexpr size_t kMaxClose = 3;

// The distinct calibrations of the plans of `ranked` predicted within `slack` of the fastest, at
// most `most` of them, the fastest plans' first.
std::vector<costs::CalibrationKey> calibrations_within(CostBook& book, const PlanRequest& request,
                                                       const std::vector<Plan>& ranked,
                                                       double slack, size_t most) {
  std::vector<costs::CalibrationKey> keys;
  for (const auto& plan : ranked) {
    const auto key = calibration_key(book, request, plan.shape);
    if (keys.size() < most && plan.step_ms <= slack * ranked.front().step_ms &&
        std::find(keys.begin(), keys.end(), key) == keys.end()) {
      keys.push_back(key);
    }
  }
  return keys;
}

SearchResult search_once(CostBook& book, const PlanRequest& request) {
  SearchResult out;
  for (const auto& shape : candidate_shapes(request, book.num_layers())) {
    auto plan = predict(book, request, shape);
    ++out.considered;
    if (!out.smallest || plan.max_peak_bytes() < out.smallest->max_peak_bytes()) {
      out.smallest = plan;
    }
    if (request.memory_per_device <= 0 || plan.max_peak_bytes() <= request.memory_per_device) {
      out.ranked.push_back(std::move(plan));
    }
  }
  // Fastest first; among equals the smaller peak, then the simpler plan (fewer devices).
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Plan& a, const Plan& b) {
    if (std::abs(a.step_ms - b.step_ms) > 1e-9 * std::max(a.step_ms, b.step_ms)) {
      return a.step_ms < b.step_ms;
    }
    return a.max_peak_bytes() < b.max_peak_bytes();
  });
  return out;
}

}  // namespace

SearchResult search(CostBook& book, const PlanRequest& request) {
  auto out = search_once(book, request);
  if (request.calibration_rounds <= 1 || out.ranked.empty()) return out;
  // Each search after measuring predicts from the medians of every round so far. The medians can
  // crown a plan whose calibration was not a contender (on a busy machine they did): its rounds
  // are then taken too, until the winner's calibration has them all (a few passes at most).
  for (int pass = 0; pass < kMaxRoundPasses && !out.ranked.empty(); ++pass) {
    const auto contenders =
        calibrations_within(book, request, out.ranked, kContenderSlack, kMaxContenders);
    if (book.calibrate_in_rounds(contenders, request.calibration_rounds) == 0) break;
    out = search_once(book, request);
  }
  if (request.calibration_extra_rounds == 0 || out.ranked.empty()) return out;
  const auto close = calibrations_within(book, request, out.ranked, kCloseSlack, kMaxClose);
  if (book.calibrate_in_rounds(close, request.calibration_rounds,
                               request.calibration_extra_rounds) > 0) {
    out = search_once(book, request);
  }
  return out;
}

}  // namespace gpipe::plan
