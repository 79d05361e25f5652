// The command-line flags of a PipelineShape, declared once for every program that takes a shape.
//
// Why this file exists: gpipe_train, gpipe_plan, gpipe_sim and engine_overhead all take K, M,
// the schedule, v, the balances, re-materialisation, the devices and the threads; one
// declaration gives them the same names, bounds, help and errors, and keeps CLI11 out of
// pipeline_shape.h.
#pragma once

#include <torch/arg.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "common/pipeline_shape.h"

namespace gpipe {

// Which of the shape's flags a program declares beyond -K, --schedule, --virtual-stages and
// --checkpoint, which every program that takes a shape has.
struct ShapeFlagSet {
  TORCH_ARG(bool, balances) = true;   // --balance, --stage-balance
  TORCH_ARG(bool, chunks) = true;     // --chunks/-M (a program that sweeps M declares its own)
  TORCH_ARG(bool, placement) = true;  // --devices, --threads-per-device
};

// Declares --partitions/-K, --checkpoint, --schedule and --virtual-stages, and as `which` says
// --balance, --stage-balance, --chunks/-M, --devices and --threads-per-device in `group` ("Options"
// is CLI11's default group; an empty one hides the flags from --help); each
// value is checked and parsed into `shape` as it is read (the flags, a TOML preset or --config),
// and the shape's values before parsing are the defaults shown. --devices also takes a count of
// cores to plan for ("4"): that goes to `planning_cores`, the device list stays empty.
void add_shape_flags(CLI::App& app, PipelineShape& shape, int64_t& planning_cores,
                     const std::string& group, const ShapeFlagSet& which = {});

}  // namespace gpipe
