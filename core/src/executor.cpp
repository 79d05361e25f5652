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

// One device's run of its lowered list in one step: each action against its stage, the slots
// between them and the transport.
class DeviceRun {
 public:
  DeviceRun(int64_t device, const Schedule& schedule, const StepData& data, Transport& transport,
            std::vector<Activations>* outputs)
      : device_(device),
        schedule_(schedule),
        data_(data),
        transport_(transport),
        outputs_(outputs),
        last_(schedule.num_stages() - 1),
        split_(schedule.splits_backward()) {}

  // Runs `a` on `stage`; returns whether it was communication (a SEND or RECV).
  bool run(const Action& a, Stage& stage) {
    const int64_t s = a.stage, m = a.microbatch;
    switch (a.kind) {
      case ActionKind::kRecvForward:
        slots_.put(Slot::kActivationIn, s, m, receive(a, Direction::kForward));
        return true;
      case ActionKind::kForward:
        forward(a, stage);
        return false;
      case ActionKind::kSendForward:
        send(a, Direction::kForward, slots_.take(Slot::kActivationOut, s, m, a));
        return true;
      case ActionKind::kRecompute:
        stage.recompute(m);
        return false;
      case ActionKind::kRecvBackward:
        slots_.put(Slot::kGradientIn, s, m, receive(a, Direction::kBackward));
        return true;
      case ActionKind::kBackward: {
        Activations grad_output =
            s == last_ ? Activations{} : slots_.take(Slot::kGradientIn, s, m, a);
        Activations grad_input = stage.backward(m, grad_output, /*defer_weights=*/split_);
        if (s > 0) slots_.put(Slot::kGradientOut, s, m, std::move(grad_input));
        return false;
      }
      case ActionKind::kSendBackward:
        send(a, Direction::kBackward, slots_.take(Slot::kGradientOut, s, m, a));
        return true;
      case ActionKind::kWeight:
        stage.backward_weight(m);
        return false;
    }
    return false;
  }

 private:
  void forward(const Action& a, Stage& stage) {
    const int64_t s = a.stage, m = a.microbatch;
    Activations input = s == 0 ? data_.inputs.at(m) : slots_.take(Slot::kActivationIn, s, m, a);
    Activations output;
    if (!data_.training) {
      output = stage.infer(m, input);
    } else if (s == last_) {
      output = stage.forward(m, input, a.checkpoint, data_.targets.at(m), data_.weights.at(m),
                             data_.loss);
    } else {
      output = stage.forward(m, input, a.checkpoint);
    }
    if (s < last_) {
      slots_.put(Slot::kActivationOut, s, m, std::move(output));
    } else if (outputs_ != nullptr) {
      (*outputs_)[m] = std::move(output);
    }
  }

  Activations receive(const Action& a, Direction direction) {
    const MessageKey key{data_.step, a.peer, a.stage, a.microbatch, direction};
    return transport_.recv(schedule_.device_of(a.peer), device_, key);
  }

  void send(const Action& a, Direction direction, Activations tensors) {
    const MessageKey key{data_.step, a.stage, a.peer, a.microbatch, direction};
    const int64_t to = schedule_.device_of(a.peer);
    if (data_.sent_bytes != nullptr && to != device_) *data_.sent_bytes += nbytes(tensors);
    transport_.send(device_, to, key, std::move(tensors));
  }

  const int64_t device_;
  const Schedule& schedule_;
  const StepData& data_;
  Transport& transport_;
  std::vector<Activations>* outputs_;
  const int64_t last_;
  const bool split_;
  Slots slots_;
};

}  // namespace

void run_device_actions(int64_t device, const Schedule& schedule, const std::vector<Stage*>& stages,
                        const StepData& data, Transport& transport, Timeline* timeline,
                        std::vector<Activations>* outputs) {
  GPIPE_CHECK(schedule.lowered, ConfigError, "the executor runs lowered schedules only");
  GPIPE_CHECK(data.training != schedule.forward_only, ConfigError,
              data.training ? "training needs a training schedule"
                            : "evaluation needs a forward-only schedule");
  const bool split = schedule.splits_backward();
  for (int64_t s = 0; s < schedule.num_stages(); ++s) {
    if (schedule.device_of(s) == device)
      stages.at(s)->begin_step(data.step, schedule.microbatches, data.seed);
  }
  transport.begin_step(device, schedule, data.step);
  DeviceRun run(device, schedule, data, transport, outputs);
  for (const Action& a : schedule.actions.at(device)) {
    const bool finalises = a.final_gradient && data.reducer != nullptr;
    // An unsplit B accumulates each gradient through autograd: the hooks report them one by one.
    if (finalises && !split) data.reducer->arm(a.stage);
    const auto start = Timeline::Clock::now();
    const bool communication = run.run(a, *stages.at(a.stage));
    if (finalises) data.reducer->stage_done(a.stage);
    if (timeline != nullptr) {
      std::string name = to_string(a);
      if (a.peer >= 0) name = name.substr(0, name.find('('));
      timeline->record(device, std::move(name), data.step, a.microbatch, start,
                       Timeline::Clock::now(), a.stage, communication);
    }
  }
  transport.end_step(device);
}

}  // namespace gpipe
