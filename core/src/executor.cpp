#include "gpipe/executor.h"

#include <map>
#include <tuple>

#include "gpipe/errors.h"

namespace gpipe {
namespace {

// Where a tensor list waits between the action that makes it and the one that takes it.
enum class Slot { kActivationIn, kActivationOut, kGradientIn, kGradientOut };

class Slots {
 public:
  void put(Slot slot, int64_t stage, int64_t m, Activations tensors) {
    slots_[{slot, stage, m}] = std::move(tensors);
  }
  Activations take(Slot slot, int64_t stage, int64_t m, const Action& consumer) {
    auto it = slots_.find({slot, stage, m});
    GPIPE_CHECK(it != slots_.end(), InternalError, to_string(consumer), " of stage ", stage,
                " finds nothing to consume: the lowered schedule is inconsistent");
    auto out = std::move(it->second);
    slots_.erase(it);
    return out;
  }

 private:
  std::map<std::tuple<Slot, int64_t, int64_t>, Activations> slots_;
};

}  // namespace

void run_device_actions(int64_t device, const Schedule& schedule, const std::vector<Stage*>& stages,
                        const StepData& data, Transport& transport, Timeline* timeline,
                        std::vector<Activations>* outputs) {
  GPIPE_CHECK(schedule.lowered, ConfigError, "the executor runs lowered schedules only");
  GPIPE_CHECK(data.training != schedule.forward_only, ConfigError,
              data.training ? "training needs a training schedule"
                            : "evaluation needs a forward-only schedule");
  const int64_t M = schedule.microbatches;
  const int64_t last = schedule.num_stages() - 1;
  const bool split = schedule.splits_backward();
  for (int64_t s = 0; s <= last; ++s) {
    if (schedule.device_of(s) == device) stages.at(s)->begin_step(data.step, M, data.seed);
  }
  transport.begin_step(device, schedule, data.step);
  Slots slots;
  for (const Action& a : schedule.actions.at(device)) {
    const int64_t s = a.stage, m = a.microbatch;
    const bool finalises = a.final_gradient && data.reducer != nullptr;
    // An unsplit B accumulates each gradient through autograd: the hooks report them one by one.
    if (finalises && !split) data.reducer->arm(s);
    Stage& stage = *stages.at(s);
    const auto start = Timeline::Clock::now();
    bool communication = false;
    MessageKey key{data.step, s, a.peer, m, Direction::kForward};
    switch (a.kind) {
      case ActionKind::kRecvForward:
        key = {data.step, a.peer, s, m, Direction::kForward};
        slots.put(Slot::kActivationIn, s, m,
                  transport.recv(schedule.device_of(a.peer), device, key));
        communication = true;
        break;
      case ActionKind::kForward: {
        Activations input = s == 0 ? data.inputs.at(m) : slots.take(Slot::kActivationIn, s, m, a);
        Activations output;
        if (!data.training) {
          output = stage.infer(m, input);
        } else if (s == last) {
          output = stage.forward(m, input, a.checkpoint, data.targets.at(m), data.weights.at(m),
                                 data.loss);
        } else {
          output = stage.forward(m, input, a.checkpoint);
        }
        if (s < last) {
          slots.put(Slot::kActivationOut, s, m, std::move(output));
        } else if (outputs != nullptr) {
          (*outputs)[m] = std::move(output);
        }
        break;
      }
      case ActionKind::kSendForward:
        transport.send(device, schedule.device_of(a.peer), key,
                       slots.take(Slot::kActivationOut, s, m, a));
        communication = true;
        break;
      case ActionKind::kRecompute:
        stage.recompute(m);
        break;
      case ActionKind::kRecvBackward:
        key = {data.step, a.peer, s, m, Direction::kBackward};
        slots.put(Slot::kGradientIn, s, m, transport.recv(schedule.device_of(a.peer), device, key));
        communication = true;
        break;
      case ActionKind::kBackward: {
        Activations grad_output =
            s == last ? Activations{} : slots.take(Slot::kGradientIn, s, m, a);
        Activations grad_input = stage.backward(m, grad_output, /*defer_weights=*/split);
        if (s > 0) slots.put(Slot::kGradientOut, s, m, std::move(grad_input));
        break;
      }
      case ActionKind::kSendBackward:
        key.direction = Direction::kBackward;
        transport.send(device, schedule.device_of(a.peer), key,
                       slots.take(Slot::kGradientOut, s, m, a));
        communication = true;
        break;
      case ActionKind::kWeight:
        stage.backward_weight(m);
        break;
    }
    if (finalises) data.reducer->stage_done(s);
    if (timeline != nullptr) {
      std::string name = to_string(a);
      if (a.peer >= 0) name = name.substr(0, name.find('('));
      timeline->record(device, std::move(name), data.step, m, start, Timeline::Clock::now(), s,
                       communication);
    }
  }
  transport.end_step(device);
}

}  // namespace gpipe
