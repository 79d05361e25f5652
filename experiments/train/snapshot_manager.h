// Snapshots of a training run on disk: written atomically, found again, pruned.
//
// Why this file exists: a run must survive being killed. A snapshot is a folder
// `step-<N>/` holding one shard per stage (core's snapshot.h: parameters, buffers and optimizer
// state by global name, so any K loads it) and a manifest with the run's position (step, epoch,
// batch in the epoch), its losses so far and its configuration. It is written under a
// temporary name and renamed only when complete, and `latest` names the newest complete one,
// so a process that dies mid-write leaves the previous snapshot loadable. In a distributed
// run every stage of replica 0 writes its own shard and rank 0 completes the folder.
//
// A folder belongs to one run. Every manifest carries the run's id (drawn when the run starts,
// kept by a resume); a run that does not resume refuses a folder holding another run's
// snapshots unless told to overwrite them, and pruning removes only the run's own snapshots.
// While a run lives it holds the folder's lock (`.lock`, files.h's FileLock): a second run on
// the same folder, even a resume of the same run, is refused naming the holder's PID. Newest and
// oldest are by step number. The manifest records every shard's checksum; a shard that does not
// match it, and a snapshot holding NaN or infinite weights, are unusable (resume falls back to
// an older one with a warning naming it).
// Two runs writing into one folder once interleaved their steps: `latest` named a folder the
// other had pruned, and a resume continued the wrong run.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gpipe/files.h"
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

// A new run's id: 16 hex digits, drawn at random.
std::string new_run_id();

// How a run takes its snapshot folder.
enum class FolderUse {
  kFresh,      // a new run: the folder must hold no complete snapshot
  kResume,     // continue the run whose snapshots the folder holds (resume())
  kOverwrite,  // a new run that deletes the snapshots found in the folder first
};

class SnapshotManager {
 public:
  // `world`: the run's processes (single_process_world() in-process); rank 0 keeps the folder,
  // replica 0's ranks write their stages' shards. Throws ConfigError naming the run found
  // there when `use` is kFresh and the folder holds a complete snapshot, and naming the PID of
  // the process holding the folder's lock when another run writes it.
  SnapshotManager(std::string dir, int64_t keep, FolderUse use, World& world);

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
  nlohmann::json resume(Pipeline& pipeline, const nlohmann::json& run, std::string* loaded_from);

  // Restores `pipeline` from `path` (a snapshot folder, or a snapshot-dir whose latest is
  // taken) and returns the manifest. Throws ConfigError for a snapshot of another model and
  // InputError naming the file for a corrupt one (nothing is restored then).
  static nlohmann::json load(Pipeline& pipeline, const std::string& path,
                             const LoadOptions& options, const nlohmann::json& run,
                             LoadReport* report = nullptr);
  // A snapshot folder from a folder that is one, or holds `latest`.
  static std::string resolve(const std::string& path);
  // The run's id: drawn anew, or the resumed snapshot's.
  const std::string& run_id() const { return run_id_; }

 private:
  std::string write(Pipeline& pipeline, const RunPosition& position, const nlohmann::json& run,
                    const std::filesystem::path& tmp_dir);

  // Restores `pipeline` from the snapshot folder `dir` whose manifest (already read) is
  // `manifest`: checks it, the model, and each shard against its checksum.
  static LoadReport restore(Pipeline& pipeline, const std::string& dir,
                            const nlohmann::json& manifest, const LoadOptions& options,
                            const nlohmann::json& run);
  // Removes this run's oldest snapshots beyond `keep_`; another run's are left alone.
  void prune() const;

  std::string dir_;
  int64_t keep_;
  World& world_;
  std::string run_id_;              // written into every manifest; a resume takes the snapshot's
  std::unique_ptr<FileLock> lock_;  // rank 0's hold on the folder, for the whole run
};

}  // namespace gpipe::train
