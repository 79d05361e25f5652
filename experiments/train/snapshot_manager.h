// Snapshots of a training run on disk: written atomically, found again, pruned.
//
// Why this file exists: a run must survive being killed. A snapshot is a folder
// `step-<N>/` holding one shard per stage (core's snapshot.h: parameters, buffers and optimizer
// state by global name, so any K loads it) and a manifest with the run's position (step, epoch,
// batch in the epoch), its losses so far and its configuration. It is written under a
// temporary name and renamed only when complete, and `latest` names the newest complete one,
// so a process that dies mid-write leaves the previous snapshot loadable. In a distributed
// run every stage of replica 0 writes its own shard and rank 0 completes the folder.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gpipe/pipeline.h"
#include "gpipe/snapshot.h"
#include "gpipe/world.h"

namespace gpipe::train {

// Where a run is: restored exactly by a resume.
struct RunPosition {
  int64_t step = 0;   // steps done
  int64_t epoch = 0;  // current epoch
  int64_t batch = 0;  // batches of the current epoch done
  std::vector<double> losses;
};

class SnapshotManager {
 public:
  // `world`: the run's processes (single_process_world() in-process); rank 0 keeps the folder,
  // replica 0's ranks write their stages' shards.
  SnapshotManager(std::string dir, int64_t keep, World& world);

  // Saves `pipeline` at `position`; `run` (the run's configuration) goes into the manifest.
  // Returns the snapshot's folder.
  std::string save(Pipeline& pipeline, const RunPosition& position, const nlohmann::json& run);
  // The newest complete snapshot in the folder, if any.
  std::optional<std::string> latest() const;
  // Every complete snapshot, the one `latest` names first, then the others newest first.
  std::vector<std::string> candidates() const;
  // Restores `pipeline` from the newest snapshot that loads: a corrupt or truncated one is
  // skipped with a warning naming it. Throws InputError naming them all when none is valid,
  // ConfigError for a snapshot of another model. `loaded_from` receives the folder used.
  nlohmann::json resume(Pipeline& pipeline, const nlohmann::json& run,
                        std::string* loaded_from) const;

  // Restores `pipeline` from `path` (a snapshot folder, or a snapshot-dir whose latest is
  // taken) and returns the manifest. Throws ConfigError for a snapshot of another model and
  // InputError naming the file for a corrupt one (nothing is restored then).
  static nlohmann::json load(Pipeline& pipeline, const std::string& path,
                             const LoadOptions& options, const nlohmann::json& run,
                             LoadReport* report = nullptr);
  // A snapshot folder from a folder that is one, or holds `latest`.
  static std::string resolve(const std::string& path);

 private:
  std::string write(Pipeline& pipeline, const RunPosition& position, const nlohmann::json& run,
                    const std::filesystem::path& tmp_dir);

  std::string dir_;
  int64_t keep_;
  World& world_;
};

}  // namespace gpipe::train
