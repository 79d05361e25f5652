// PipelineShape: the shape of one pipeline, typed, as every layer above the engine describes it.
//
// Why this file exists: the trainer runs a shape, the planner chooses one and the command line
// names one. One type carries K, R, M, the schedule, v, re-materialisation, the balances, the
// devices and the threads, so a plan becomes a run by assignment. Strings exist only where the
// command line is read (shape_flags.h) or printed (to_flags, describe), and each printer is
// the inverse of its reader (tested for every schedule). No CLI11 here: the costs, the planner
// and the tables use the shape without the command-line layer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpipe/pipeline.h"
#include "gpipe/schedule_file.h"

namespace gpipe {

// How the model's layers are cut: one list in one of two units. Per device (K entries, as
// --balance gives it) or per virtual stage (K x v entries in stage order, as --stage-balance,
// a plan or the trainer's partitioner give it where v > 1). The other form is derived
// (PipelineShape::device_balance and stage_balance), never stored beside it. Empty: not chosen
// yet (the trainer balances; a projection balances by time).
struct Balance {
  enum class Unit { kDevice, kStage };
  std::vector<int64_t> layers;
  Unit unit = Unit::kDevice;

  static Balance per_device(std::vector<int64_t> layers) {
    return {std::move(layers), Unit::kDevice};
  }
  static Balance per_stage(std::vector<int64_t> layers) {
    return {std::move(layers), Unit::kStage};
  }
  bool empty() const { return layers.empty(); }
  bool per_stage() const { return unit == Unit::kStage; }
  // The layers per virtual stage when given so, else empty (the engine splits each device's
  // layers evenly): what PipelineOptions::stage_balance and the recorded settings take.
  std::vector<int64_t> explicit_stages() const {
    return per_stage() ? layers : std::vector<int64_t>{};
  }
  // "--balance 3,2" or "--stage-balance 1,2,1,1": the flag that gives it.
  std::string describe() const;
  bool operator==(const Balance& o) const {
    return layers == o.layers && (layers.empty() || unit == o.unit);
  }
  bool operator!=(const Balance& o) const { return !(*this == o); }
};

struct PipelineShape {
  int64_t K = 0;  // devices per replica; 0: the balance's length, or 1
  // Data-parallel replicas: a launcher's choice, no gpipe_train flag; a distributed run sets it
  // from its world (WORLD_SIZE / K), the planner and the launchers read it.
  int64_t R = 1;
  int64_t M = 1;  // micro-batches of each replica's batch
  ScheduleKind schedule = ScheduleKind::kGPipe;
  // With schedule kCustom: the file it was read from (--schedule file:PATH) and its actions.
  std::string schedule_file;
  std::shared_ptr<const Schedule> program;
  int64_t v = 0;  // virtual stages per device; 0: the schedule's default
  Checkpoint checkpoint = Checkpoint::kExceptLast;
  Balance balance;                   // empty: the trainer balances
  std::vector<std::string> devices;  // one per device; empty: cpu:0 .. cpu:K-1
  int threads = 0;                   // intra-op threads per device; 0: automatic
  // What the stages compute in (gpipe/precision.h). Not part of describe() or to_flags(): a
  // plan's name is its layout, and --precision is a training flag that commands carry apart.
  Precision precision = Precision::kFp32;

  // v, or the schedule's default when v is 0.
  int64_t virtual_stages() const;
  // The device of each of the K x v virtual stages: the file's, or the schedule's.
  std::vector<int64_t> placement() const;
  // Layers per device: the balance's, or the sums of its stages on each device (placement();
  // K from the balance where the shape has none). Empty without a balance.
  std::vector<int64_t> device_balance() const;
  // Layers per virtual stage: the balance's, or the engine's split of each device's layers over
  // its v stages (make_layout: an even split, ConfigError where a device's count is not a
  // multiple of v). Empty without a balance.
  std::vector<int64_t> stage_balance() const;
  // The training step's compute actions: the file's, or make_schedule's for this shape.
  Schedule training_schedule() const;
  // "zb-h1", or "file:PATH" for a custom schedule: what --schedule reads back.
  std::string schedule_name() const;
  bool operator==(const PipelineShape& other) const;
  bool operator!=(const PipelineShape& other) const { return !(*this == other); }

  // "K=2,R=1,M=8,schedule=1f1b,v=1,checkpoint=never,threads=1": what a plan is called.
  std::string describe() const;
};

// Sets the schedule from --schedule's text: a kind's name, or "file:PATH" (schedule_file.h):
// then the file's v, and its K and M where `shape` has none of its own (K 0, M 1); the pipeline
// refuses a K or M that disagrees with the file. Throws ConfigError naming the name, or the path
// and the file's line.
void set_schedule(PipelineShape& shape, const std::string& text);
// The same check alone: what --schedule's validator runs (cli::parsed_by(check_schedule)).
void check_schedule(const std::string& text);

// The inverse of describe() for its keys (the balances and devices are not part of it). Keys
// left out take K=1, R=1, M=1, gpipe, the schedule's v, checkpoint never, threads 1. Throws
// ConfigError naming a bad key or value.
PipelineShape parse_shape(const std::string& text);

// gpipe_train's flags for `shape` (R is not a flag), its balance in its own unit: parsing them
// with add_shape_flags (shape_flags.h) gives the shape back.
std::vector<std::string> to_flags(const PipelineShape& shape);

// The devices K that `stage_balance` fills at v virtual stages per device, checked against `K`
// (0: not given). Throws ConfigError "--stage-balance has S entries; it needs K x v = ..." when
// S is not K x v (or not a multiple of v).
int64_t devices_of_stage_balance(const std::vector<int64_t>& stage_balance, int64_t K, int64_t v);

// Cuts `shape` (its K, schedule and v set) by `stage_balance`, one entry per virtual stage: kept
// per stage where v > 1, and as each device's sum (placement()) at v = 1, where the two are one
// list.
void set_stage_balance(PipelineShape& shape, std::vector<int64_t> stage_balance);

// The engine's options for `shape`; the balance must be chosen (not empty).
PipelineOptions to_pipeline_options(const PipelineShape& shape);

}  // namespace gpipe
