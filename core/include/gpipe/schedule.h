// Schedules as data: the whole program of a step.
//
// Why this file exists: what each device does, and in which order, is a pure function of
// (K devices, M micro-batches, v virtual stages per device, kind). A schedule function emits the
// compute actions of every device: F (forward), B (backward: the input gradient, and the weight
// gradient too unless a W follows), W (the deferred weight gradient), on (virtual stage,
// micro-batch). One lowering pass (lowering.h) adds R (recompute) and the SEND/RECV actions with
// their peers. The executor, the transports, the deadlock check and the simulator all read that
// lowered list and derive nothing themselves, so a new schedule is one function here.
//
// The drawings below are what `gpipe_sim --draw` prints at unit costs (F = B = W = 1, and B = 2
// where it includes W); a test keeps each one equal to the generator's output. Upper case is a
// device's first virtual stage, lower case its second.
//
// gpipe (fill-drain, the paper's): every forward, then every backward, last micro-batch first
// (its activations are the freshest, and with checkpoint=except_last it needs no recompute).
// K=3, M=4:
//
//   s0  F0 F1 F2 F3 .  .  .  .  .  .  B3 B3 B2 B2 B1 B1 B0 B0
//   s1  .  F0 F1 F2 F3 .  .  .  B3 B3 B2 B2 B1 B1 B0 B0 .  .
//   s2  .  .  F0 F1 F2 F3 B3 B3 B2 B2 B1 B1 B0 B0 .  .  .  .
//
// 1f1b (PipeDream-flush): stage s runs K-s-1 warm-up forwards, then alternates one forward and
// one backward, then drains. Same bubble, but a device holds at most K micro-batches, not M:
//
//   s0  F0 F1 F2 .  .  .  .  B0 B0 F3 B1 B1 .  B2 B2 .  B3 B3
//   s1  .  F0 F1 .  .  B0 B0 F2 B1 B1 F3 B2 B2 .  B3 B3 .  .
//   s2  .  .  F0 B0 B0 F1 B1 B1 F2 B2 B2 F3 B3 B3 .  .  .  .
//
// interleaved-1f1b (Megatron's): device d holds virtual stages d, d+K, ..., each 1/v of its
// layers, and runs 1F1B over them in rounds of K micro-batches; a forward is 1/v as long, so the
// fill and drain shrink v times: bubble (K-1)/(vM+K-1). Needs M a multiple of K. K=2, M=4, v=2:
//
//   s0  F0 F1 f0 f1 F2 .  b0 b0 F3 b1 b1 f2 B0 B0 f3 B1 B1 .  b2 b2 .  b3 b3 B2 B2 B3 B3
//   s1  .  F0 F1 f0 b0 b0 f1 b1 b1 F2 B0 B0 F3 B1 B1 f2 b2 b2 f3 b3 b3 B2 B2 B3 B3 .  .
//
// zb-h1 (zero bubble, Qi et al. 2023): 1F1B's order with each backward split into B and W;
// stage s defers W(m) until after B(m+s), so its W's fill the drain. A stage holds at most K
// micro-batches (1F1B's peak), and the bubble falls from (K-1)(F+B+W) to (K-1)(F+B-W):
//
//   s0  F0 F1 F2 .  .  B0 W0 F3 B1 W1 B2 W2 B3 W3
//   s1  .  F0 F1 .  B0 F2 B1 W0 F3 B2 W1 B3 W2 W3
//   s2  .  .  F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3
//
// zbv (zero bubble V): two virtual stages per device in a V: device d holds stage d (going down)
// and stage 2K-1-d (coming back up), so the last stage is on device 0 beside the first. The
// order comes from a list scheduler run at unit costs: each device takes the ready action that
// can start first (B before F on a tie), forwards only while it holds fewer than 2K half-stage
// micro-batches (1F1B's peak), and runs a deferred W only where it ends before the next input
// arrives, or when memory forces it. K=2, M=2:
//
//   s0  F0 F1 .  f0 b0 f1 b1 B0 w0 B1 w1 W0 W1
//   s1  .  F0 f0 F1 f1 b0 B0 b1 B1 w0 W0 w1 W1
//
// zb-h2 (zero bubble with more memory, Qi et al. 2023): zb-h1's split, but a device may hold 2K-1
// micro-batches (the paper's first stage's), so the warm-up runs forwards into the first bubble
// and the drain runs its B's first, the W's after. Ordered by zbv's list scheduler over one stage
// per device. Bubble (K-1) max(F, F+B-2W): the paper's (K-1)(F+B-2W) assumes the next step's
// forwards overlap this one's tail; a step that ends together still waits (K-1)F on the last
// device. K=3, M=6:
//
//   s0  F0 F1 F2 F3 F4 B0 W0 B1 F5 B2 W1 B3 W2 B4 W3 W4 B5 W5 .  .
//   s1  .  F0 F1 F2 B0 F3 B1 F4 B2 W0 B3 F5 B4 W1 W2 B5 W3 W4 W5 .
//   s2  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 W0 F5 B5 W1 W2 W3 W4 W5
//
// looped-bfs (breadth first, Lamy-Poirier 2022): interleaved-1f1b's placement, gpipe's order:
// every micro-batch through a device's first stage, then through its next; the backwards in
// reverse. The bubble of interleaved-1f1b, (K-1)/(vM+K-1) for M >= K, at any M, holding all M
// micro-batches as gpipe does. K=2, M=4, v=2:
//
//   s0  F0 F1 F2 F3 f0 f1 f2 f3 .  .  .  b3 b3 b2 b2 b1 b1 b0 b0 B3 B3 B2 B2 B1 B1 B0 B0
//   s1  .  F0 F1 F2 F3 f0 f1 f2 f3 b3 b3 b2 b2 b1 b1 b0 b0 B3 B3 B2 B2 B1 B1 B0 B0 .  .
//
// dualpipev (DeepSeek-V3's DualPipe cut in half): zbv's V, in DualPipeV's eight phases per
// device; its steady state pairs the forward of one micro-batch with the backward of another.
// DeepSeek's engine overlaps the two; here a pair runs as two actions, F then B. Backwards
// outside its zero-bubble phases run whole (a B with its W right after). Needs M >= 2K.
// K=2, M=4:
//
//   s0  F0 F1 F2 f0 b0 w0 f1 F3 b1 w1 f2 B0 W0 b2 w2 f3 B1 W1 b3 w3 B2 W2 .  B3 W3
//   s1  .  F0 f0 F1 f1 F2 b0 w0 f2 B0 W0 F3 b1 w1 f3 B1 W1 b2 w2 B2 W2 b3 B3 w3 W3
//
// v-half (a memory-lean V, after Qi et al. 2024's V-Half): zbv's V and list scheduler, but a
// micro-batch enters only every 6 units (F, B and W of both halves: the steady state's pace), so
// a device holds at most ceil(K/2) micro-batches from K = 3 on (about 0.4K at large K), half of
// 1F1B's K. Bubble (K-1)(F+B) - W/2 at F = B = W, the last micro-batch's path: 2/3 of 1F1B's.
// An order fixed at unit costs: with a smaller W it idles more (the simulator shows how much).
// K=2, M=4:
//
//   s0  F0 .  .  f0 b0 w0 F1 B0 W0 f1 b1 w1 F2 B1 W1 f2 b2 w2 F3 B2 W2 f3 b3 w3 .  B3 W3
//   s1  .  F0 f0 .  .  b0 B0 F1 f1 w0 W0 b1 B1 F2 f2 w1 W1 b2 B2 F3 f3 w2 W2 b3 B3 w3 W3
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

enum class ActionKind {
  kForward,       // F
  kBackward,      // B: input gradient; the weight gradient too unless a W of it follows
  kWeight,        // W: the weight gradient a split B deferred
  kRecompute,     // R: replays a checkpointed forward with grad on (added by lowering)
  kSendForward,   // activations to `peer` (added by lowering)
  kRecvForward,   // activations from `peer`
  kSendBackward,  // input gradients to `peer`
  kRecvBackward,  // output gradients from `peer`
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int64_t stage = 0;  // virtual stage, 0 .. K*v-1 in model order
  int64_t microbatch = 0;
  int64_t peer = -1;        // SEND/RECV: the virtual stage at the other end
  bool checkpoint = false;  // F: keep only the input; an R replays it before the B
  // B or W (set by lowering): the stage's last gradient action of the step, after which its
  // gradients are final and the gradient reducer may send them.
  bool final_gradient = false;

  bool operator==(const Action& other) const {
    return kind == other.kind && stage == other.stage && microbatch == other.microbatch &&
           peer == other.peer && checkpoint == other.checkpoint &&
           final_gradient == other.final_gradient;
  }
};

enum class ScheduleKind {
  kGPipe,
  k1F1B,
  kInterleaved1F1B,
  kZBH1,
  kZBV,
  kZBH2,
  kLoopedBFS,
  kDualPipeV,
  kVHalf,
  kCustom,  // read from a file (schedule_file.h): its placement and order are the file's
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::kGPipe;
  int64_t devices = 0;                       // K
  int64_t virtual_stages = 1;                // v
  int64_t microbatches = 0;                  // M
  bool forward_only = false;                 // evaluation: F only
  bool lowered = false;                      // R, SEND and RECV added
  std::vector<int64_t> stage_device;         // device of each virtual stage (K*v entries)
  std::vector<std::vector<Action>> actions;  // per device, in execution order

  int64_t num_stages() const { return static_cast<int64_t>(stage_device.size()); }
  int64_t device_of(int64_t stage) const { return stage_device.at(stage); }
  // Whether the backward is split into B and W (the schedule lists W actions).
  bool splits_backward() const;
};

// The schedule of a training step: compute actions only (lower() adds the rest). Throws
// ConfigError naming the values for K < 1, M < 1, a v the kind does not take (gpipe, 1f1b,
// zb-h1 and zb-h2 take 1; the V's zbv, dualpipev and v-half 2), a V with K = 1,
// interleaved-1f1b with M not a multiple of K, or dualpipev with M < 2K.
Schedule make_schedule(ScheduleKind kind, int64_t devices, int64_t microbatches,
                       int64_t virtual_stages = 1);

// Why make_schedule would refuse (kind, K, M, v), its ConfigError's message; "" where it runs.
// For callers that try shapes (the planner, the tests) rather than report one.
std::string schedule_shape_error(ScheduleKind kind, int64_t devices, int64_t microbatches,
                                 int64_t virtual_stages);

// Evaluation: forwards only, each device in wavefront order (micro-batch + stage), with the
// placement of `kind`.
Schedule make_forward_schedule(ScheduleKind kind, int64_t devices, int64_t microbatches,
                               int64_t virtual_stages = 1);
// The same for `training`'s devices and placement (a custom schedule's too), at M micro-batches.
Schedule forward_schedule_like(const Schedule& training, int64_t microbatches);

// v a kind runs with when none is asked for: 2 for interleaved-1f1b, looped-bfs and the V's,
// else 1.
int64_t default_virtual_stages(ScheduleKind kind);
// Throws ConfigError naming the values when `kind` does not take v virtual stages per device
// (gpipe, 1f1b, zb-h1 and zb-h2 take 1, the V's 2, interleaved-1f1b and looped-bfs any v >= 1):
// what to check before a balance is cut into K x v stages, whose own error would name the
// product, not v.
void check_virtual_stages(ScheduleKind kind, int64_t virtual_stages);
// Device of virtual stage `stage`: round robin (stage % K), or the V of zbv, dualpipev and
// v-half (stage d down, stage 2K-1-d back up).
int64_t stage_device(ScheduleKind kind, int64_t devices, int64_t virtual_stages, int64_t stage);

// The device of each of K x v virtual stages as `kind` places them.
std::vector<int64_t> placement(ScheduleKind kind, int64_t devices, int64_t virtual_stages);

// Per device: the sum of a per-virtual-stage quantity (layers, milliseconds, bytes) over the
// device's virtual stages, placed as `kind` places K x v stages (v = per_stage.size() / K), or
// as `stage_device` says (a custom schedule's placement). The one fold of stages onto devices.
// Throws ConfigError naming the sizes when per_stage.size() is not a multiple of K, or not the
// placement's size.
std::vector<int64_t> sum_per_device(ScheduleKind kind, int64_t devices,
                                    const std::vector<int64_t>& per_stage);
std::vector<double> sum_per_device(ScheduleKind kind, int64_t devices,
                                   const std::vector<double>& per_stage);
std::vector<int64_t> sum_per_device(const std::vector<int64_t>& stage_device, int64_t devices,
                                    const std::vector<int64_t>& per_stage);
std::vector<double> sum_per_device(const std::vector<int64_t>& stage_device, int64_t devices,
                                   const std::vector<double>& per_stage);

// Activations each device holds at once, in micro-batches of all its layers: a forward of a
// virtual stage adds 1/v, the action that frees it (W when the backward is split, else B)
// removes it. Maximised over the step, per device.
std::vector<double> peak_inflight(const Schedule& schedule);

// Every kind make_schedule makes (not kCustom), in the order help texts list them.
std::vector<ScheduleKind> all_schedule_kinds();
// Their names joined by `separator`: "gpipe | 1f1b | ..." for a help text.
std::string schedule_kind_names(const std::string& separator);
// "gpipe" | "1f1b" | "interleaved-1f1b" | "zb-h1" | "zb-h2" | "zbv" | "looped-bfs" |
// "dualpipev" | "v-half"
ScheduleKind parse_schedule_kind(const std::string& name);
std::string to_string(ScheduleKind kind);
// "F3", "B0", "W2", "R1"; messages name their stages: "SEND_F3(0->1)", "RECV_B0(0<-1)".
std::string to_string(const Action& action);

}  // namespace gpipe
