#include "gpipe/executor.h"

#include "gpipe/errors.h"

namespace gpipe {
namespace {

// Times `fn` as one timeline event.
template <typename Fn>
auto timed(Timeline* timeline, const Stage& stage, const char* kind, const StepData& data,
           int64_t m, Fn&& fn) {
  const auto start = Timeline::Clock::now();
  auto finish = [&] {
    if (timeline != nullptr) {
      timeline->record(stage.index(), kind + std::to_string(m), data.step, m, start,
                       Timeline::Clock::now());
    }
  };
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    finish();
  } else {
    auto result = fn();
    finish();
    return result;
  }
}

}  // namespace

void run_stage_actions(Stage& stage, const std::vector<Action>& actions, int64_t microbatches,
                       const StepData& data, Transport& transport, Timeline* timeline,
                       std::vector<Activations>* outputs) {
  const int64_t s = stage.index();
  stage.begin_step(data.step, microbatches, data.seed);
  transport.begin_stage(s, stage.num_stages(), actions, data.step, data.training);
  for (const auto& action : actions) {
    const int64_t m = action.microbatch;
    if (action.kind == ActionKind::kForward) {
      MessageKey key{data.step, m, Direction::kForward};
      Activations input = stage.is_first() ? data.inputs.at(m) : transport.recv(s - 1, s, key);
      Activations output;
      if (data.training) {
        const bool checkpoint =
            data.checkpoint == Checkpoint::kAlways ||
            (data.checkpoint == Checkpoint::kExceptLast && m != microbatches - 1);
        output = timed(timeline, stage, "F", data, m, [&] {
          return stage.is_last() ? stage.forward(m, input, checkpoint, data.targets.at(m),
                                                 data.weights.at(m), data.loss)
                                 : stage.forward(m, input, checkpoint);
        });
      } else {
        output = timed(timeline, stage, "F", data, m, [&] { return stage.infer(m, input); });
      }
      if (!stage.is_last()) {
        transport.send(s, s + 1, key, std::move(output));
      } else if (outputs != nullptr) {
        (*outputs)[m] = std::move(output);
      }
    } else {
      GPIPE_CHECK(data.training, ConfigError, "evaluation schedule contains B", m);
      // Replay a checkpointed forward before waiting for the gradient: the recompute then
      // overlaps with the next stage's backward.
      if (stage.needs_recompute(m)) {
        timed(timeline, stage, "R", data, m, [&] { stage.recompute(m); });
      }
      Activations grad_output;
      if (!stage.is_last()) {
        grad_output = transport.recv(s + 1, s, {data.step, m, Direction::kBackward});
      }
      Activations grad_input =
          timed(timeline, stage, "B", data, m, [&] { return stage.backward(m, grad_output); });
      if (!stage.is_first()) {
        transport.send(s, s - 1, {data.step, m, Direction::kBackward}, std::move(grad_input));
      }
    }
  }
  transport.end_stage(s);
}

}  // namespace gpipe
