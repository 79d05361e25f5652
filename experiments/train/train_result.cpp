// TrainResult (trainer.h): what a run reports, step by step and in summary.json.
#include "train/trainer.h"

#include <algorithm>

namespace gpipe::train {

void TrainResult::record_step(const StepStats& last, int64_t examples_loaded, bool replicated) {
  examples_loaded_per_rank.push_back(examples_loaded);
  sent_bytes_per_step = last.sent_bytes;
  if (last.skipped) ++skipped_steps;
  if (replicated) {
    grad_reduce_ms.push_back(last.grad_reduce.reduce_ms);
    grad_reduce_exposed_ms.push_back(last.grad_reduce.exposed_ms);
  }
  // The first step of a process also allocates the gradients inside its memory window: its
  // activation peak stands only until a second step replaces it.
  const size_t steps_run = step_seconds.size();
  for (size_t s = 0; s < last.peak_bytes.size(); ++s) {
    if (peak_memory_bytes_per_device.size() <= s) {
      peak_memory_bytes_per_device.push_back(0);
      peak_activation_bytes_per_device.push_back(0);
    }
    peak_memory_bytes_per_device[s] = std::max(peak_memory_bytes_per_device[s], last.peak_bytes[s]);
    auto& activation = peak_activation_bytes_per_device[s];
    activation = steps_run <= 2 ? last.peak_activation_bytes[s]
                                : std::max(activation, last.peak_activation_bytes[s]);
  }
}

nlohmann::json TrainResult::to_json() const {
  auto eval_json = [](const Evaluation& e) {
    return nlohmann::json{{"epoch", e.epoch},
                          {"step", e.step},
                          {"test_top1", e.top1},
                          {"test_top5", e.top5},
                          {"examples", e.examples}};
  };
  auto evals = nlohmann::json::array();
  for (const auto& e : evaluations)
    evals.push_back(eval_json(e));
  return {{"losses", losses},
          {"step_seconds", step_seconds},
          {"throughput_samples_per_s", throughput_samples_per_s},
          {"bubble_fraction", bubble_fraction},
          {"peak_memory_bytes_per_device", peak_memory_bytes_per_device},
          {"peak_activation_bytes_per_device", peak_activation_bytes_per_device},
          {"balance", balance},
          {"parameters", parameters},
          {"param_checksum", param_checksum},
          {"evaluations", evals},
          {"final_test_top1",
           final_evaluation ? nlohmann::json(final_evaluation->top1) : nlohmann::json(nullptr)},
          {"final_test_top5",
           final_evaluation ? nlohmann::json(final_evaluation->top5) : nlohmann::json(nullptr)},
          {"steps", steps},
          {"train_seconds", train_seconds},
          {"examples_loaded_per_rank", examples_loaded_per_rank},
          {"grad_reduce_ms", grad_reduce_ms},
          {"grad_reduce_exposed_ms", grad_reduce_exposed_ms},
          {"sent_bytes_per_step", sent_bytes_per_step},
          {"skipped_steps", skipped_steps},
          {"last_snapshot", last_snapshot}};
}

}  // namespace gpipe::train
