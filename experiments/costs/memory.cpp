#include "costs/memory.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "gpipe/errors.h"
#include "gpipe/lowering.h"
#include "gpipe/partition.h"
#include "gpipe/simulator.h"

namespace gpipe::costs {
namespace {

// What each virtual stage's actions add and free, per micro-batch (memory.h).
struct StageBytes {
  std::vector<double> kept;        // activations a forward keeps for its backward
  std::vector<double> kept_for_w;  // what a split B leaves held until W (gradients too)
  std::vector<double> input;       // what a checkpointed forward keeps: the stage's input
  std::vector<double> workspace;   // what the backward needs above `kept` while it runs
};

// What each stage's backward needs above the activations it holds when it starts: the backward
// runs the stage's layers last to first, freeing each layer's activations as it goes, so layer
// j's workspace coexists only with the activations of layers up to j.
std::vector<double> backward_extra(const LayerCosts& costs,
                                   const std::vector<int64_t>& stage_balance) {
  std::vector<double> out;
  int64_t first = 0;
  for (int64_t n : stage_balance) {
    double freed = 0, extra = 0;
    for (int64_t j = first + n - 1; j >= first; --j) {
      extra = std::max(extra, costs.backward_bytes[j] - freed);
      freed += costs.activation_bytes[j];
    }
    out.push_back(extra);
    first += n;
  }
  return out;
}

StageBytes stage_bytes(const LayerCosts& costs, const std::vector<int64_t>& stage_balance) {
  StageBytes out;
  out.kept = sum_by_stage(costs.activation_bytes, stage_balance);
  // The loss keeps its input's log-probabilities for its backward.
  out.kept.back() += costs.output_bytes.back();
  // What a split B leaves to W: as measured, or else the activations of the layers with a W.
  std::vector<double> deferring = costs.weight_bytes;
  if (deferring.size() != costs.activation_bytes.size()) {
    deferring.assign(costs.activation_bytes.size(), 0.0);
    for (size_t i = 0; i < costs.weight_ms.size() && i < deferring.size(); ++i) {
      if (costs.weight_ms[i] > 0) deferring[i] = costs.activation_bytes[i];
    }
  }
  out.kept_for_w = sum_by_stage(deferring, stage_balance);
  // A stage's input is the previous stage's output (the model's input for the first stage is
  // the host's).
  out.input.assign(stage_balance.size(), 0.0);
  int64_t end = 0;
  for (size_t s = 0; s + 1 < stage_balance.size(); ++s) {
    end += stage_balance[s];
    out.input[s + 1] = costs.output_bytes.at(end - 1);
  }
  out.workspace = backward_extra(costs, stage_balance);
  return out;
}

// The largest bytes one device's actions hold at once, in the order they run.
double replay_peak(const std::vector<Action>& actions, const StageBytes& bytes, bool split) {
  std::map<std::pair<int64_t, int64_t>, double> holding;  // (stage, micro-batch) -> bytes
  double held = 0, peak = 0;
  for (const auto& a : actions) {
    const auto key = std::make_pair(a.stage, a.microbatch);
    const auto s = static_cast<size_t>(a.stage);
    double added = 0;
    switch (a.kind) {
      case ActionKind::kForward:
        added = a.checkpoint ? bytes.input[s] : bytes.kept[s];
        break;
      case ActionKind::kRecompute:
        added = bytes.kept[s];
        break;
      case ActionKind::kBackward: {
        // While B runs, the stage's activations and its backward's workspace coexist.
        peak = std::max(peak, held + bytes.workspace[s]);
        const double left = split && bytes.kept[s] > 0 ? bytes.kept_for_w[s] / bytes.kept[s] : 0.0;
        added = -holding[key] * (1 - left);
        break;
      }
      case ActionKind::kWeight:
        added = -holding[key];
        break;
      default:
        break;
    }
    holding[key] += added;
    held += added;
    peak = std::max(peak, held);
  }
  return peak;
}

}  // namespace

std::vector<double> predict_peak_bytes(const LayerCosts& costs, const Schedule& schedule,
                                       const std::vector<int64_t>& stage_balance,
                                       Checkpoint checkpoint, int64_t state_slots) {
  GPIPE_CHECK(state_slots >= 0, ConfigError, "optimizer state slots must be >= 0, got ",
              state_slots);
  const auto bytes = stage_bytes(costs, stage_balance);
  auto peaks = sum_per_device(schedule.stage_device, schedule.devices,
                              sum_by_stage(costs.parameter_bytes, stage_balance));
  for (auto& p : peaks)
    p *= static_cast<double>(2 + state_slots);
  const auto lowered = lower(schedule, checkpoint);
  for (int64_t d = 0; d < lowered.devices; ++d)
    peaks[d] += replay_peak(lowered.actions[d], bytes, lowered.splits_backward());
  return peaks;
}

double kept_microbatches(const Schedule& schedule, Checkpoint checkpoint) {
  if (checkpoint != Checkpoint::kNever) return 1;
  const auto inflight = peak_inflight(schedule);
  return *std::max_element(inflight.begin(), inflight.end());
}

std::vector<double> layer_memory_bytes(const LayerCosts& costs, int64_t state_slots, double kept) {
  GPIPE_CHECK(state_slots >= 0, ConfigError, "optimizer state slots must be >= 0, got ",
              state_slots);
  std::vector<double> out;
  for (size_t i = 0; i < costs.parameter_bytes.size(); ++i) {
    out.push_back(costs.parameter_bytes[i] * static_cast<double>(2 + state_slots) +
                  costs.activation_bytes.at(i) * kept);
  }
  return out;
}

std::vector<int64_t> balance_by_memory(const LayerCosts& costs, int64_t K, int64_t state_slots,
                                       double kept) {
  const auto n = static_cast<int64_t>(costs.parameter_bytes.size());
  GPIPE_CHECK(K >= 1 && K <= n, ConfigError, "K=", K, " stages need at least ", K,
              " layers (one per device), but the model has ", n);
  return balance_by_cost(layer_memory_bytes(costs, state_slots, kept), K);
}

LayerCosts scaled_bytes(LayerCosts costs, double factor) {
  GPIPE_CHECK(factor > 0 && std::isfinite(factor), ConfigError,
              "a micro-batch scale must be finite and > 0, got ", factor);
  for (auto* sizes :
       {&costs.output_bytes, &costs.activation_bytes, &costs.backward_bytes, &costs.weight_bytes}) {
    for (auto& b : *sizes)
      b *= factor;
  }
  return costs;
}

}  // namespace gpipe::costs
