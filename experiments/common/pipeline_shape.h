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
  std::vector<int64_t> balance;        // layers per device; empty: the trainer balances
  std::vector<int64_t> stage_balance;  // layers per virtual stage (K x v); empty: even split
  std::vector<std::string> devices;    // one per device; empty: cpu:0 .. cpu:K-1
  int threads = 0;                     // intra-op threads per device; 0: automatic
  // What the stages compute in (gpipe/precision.h). Not part of describe() or to_flags(): a
  // plan's name is its layout, and --precision is a training flag that commands carry apart.
  Precision precision = Precision::kFp32;

  // v, or the schedule's default when v is 0.
  int64_t virtual_stages() const;
  // The device of each of the K x v virtual stages: the file's, or the schedule's.
  std::vector<int64_t> placement() const;
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

// gpipe_train's flags for `shape` (R is not a flag). Of the two balances only one is printed,
// the stage balance when v > 1 (the trainer derives the other): parsing the flags with
// add_shape_flags (shape_flags.h) gives back a shape that holds one balance.
std::vector<std::string> to_flags(const PipelineShape& shape);

// The devices K that `stage_balance` fills at v virtual stages per device, checked against `K`
// (0: not given). Throws ConfigError "--stage-balance has S entries; it needs K x v = ..." when
// S is not K x v (or not a multiple of v).
int64_t devices_of_stage_balance(const std::vector<int64_t>& stage_balance, int64_t K, int64_t v);

// Cuts `shape` (its K, schedule and v set) by `stage_balance`, one entry per virtual stage: its
// balance becomes their sums per device (placement()), and the stage balance is kept only where
// v > 1 (at v = 1 the two are one list).
void set_stage_balance(PipelineShape& shape, std::vector<int64_t> stage_balance);

// The engine's options for `shape`; the balance must be resolved (one entry per device).
PipelineOptions to_pipeline_options(const PipelineShape& shape);

}  // namespace gpipe
