#include "train/snapshot_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "gpipe/errors.h"
#include "gpipe/fault_injection.h"
#include "gpipe/files.h"
#include "gpipe/timeline.h"
#include "train/train_options.h"

namespace gpipe::train {
namespace {

namespace fs = std::filesystem;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kLatest = "latest";
constexpr const char* kLock = ".lock";  // held by the run that writes the folder (FileLock)

std::string folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

// "step-" and at least 8 digits: what folder_name writes, and all `latest` may name.
bool is_snapshot_name(const std::string& name) {
  static const std::regex pattern("step-[0-9]{8,}");
  return std::regex_match(name, pattern);
}

}  // namespace

std::string new_run_id() {
  std::random_device device;
  std::uniform_int_distribution<uint64_t> draw;
  char id[20];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(draw(device)));
  return id;
}

namespace {

// The step a snapshot folder's name gives ("step-00000012" -> 12); -1 for another name.
int64_t step_of(const fs::path& folder) {
  const auto name = folder.filename().string();
  if (!is_snapshot_name(name)) return -1;
  errno = 0;
  const auto step = std::strtoll(name.c_str() + 5, nullptr, 10);
  return errno == 0 ? step : -1;
}

// Newest first, by step number (a name sorts wrongly past 8 digits).
void sort_newest_first(std::vector<fs::path>& folders) {
  std::sort(folders.begin(), folders.end(),
            [](const fs::path& a, const fs::path& b) { return step_of(a) > step_of(b); });
}

// The manifest of the snapshot folder `dir`, or a discarded value when it does not parse. A
// manifest that is not a regular file (a FIFO) throws InputError naming it.
nlohmann::json read_manifest(const fs::path& dir) {
  const auto text = read_file((dir / kManifest).string(), "snapshot manifest", 1 << 28);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The snapshot `latest` in `dir` names, or "" when there is no `latest`. Throws InputError when
// it is not a regular file.
std::string read_latest(const fs::path& dir) {
  const auto path = dir / kLatest;
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error))) return "";
  auto name = read_file(path.string(), "the snapshot folder's 'latest'", 4096);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back())))
    name.pop_back();
  return name;
}

// "model mlp, seed 0, step 6" from a snapshot's manifest, for messages; "?" for what it lacks.
std::string describe_run(const nlohmann::json& m) {
  auto field = [](const nlohmann::json& j, const char* key) -> std::string {
    if (!j.is_object() || !j.contains(key)) return "?";
    return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
  };
  const auto run = m.is_object() && m.contains("run") ? m["run"] : nlohmann::json();
  const auto model = run.is_object() && run.contains("model") ? run["model"] : nlohmann::json();
  return c10::str("model ", field(model, "name"), ", seed ", field(run, "seed"), ", step ",
                  field(m, "step"));
}

// The loss scaler's state (the same on every rank: each step's verdict is one for all).
nlohmann::json loss_scale_json(const Pipeline& pipeline) {
  const auto& state = pipeline.loss_scaler().state();
  return {{"scale", state.scale},
          {"good_steps", state.good_steps},
          {"skipped_steps", state.skipped_steps}};
}

bool valid_loss_scale(const nlohmann::json& m) {
  if (!m.contains("loss_scale")) return true;
  const auto& s = m["loss_scale"];
  return s.is_object() && s.contains("scale") && s["scale"].is_number() &&
         s.contains("good_steps") && s["good_steps"].is_number_integer() &&
         s.contains("skipped_steps") && s["skipped_steps"].is_number_integer();
}

// Every field of a manifest that is read later, with its type: a manifest that parses but lacks
// one is as corrupt as one that does not parse (found by fuzz_snapshot).
void check_manifest(const nlohmann::json& m, const std::string& path) {
  const bool valid =
      m.is_object() && m.value("format", "") == "gpipe-snapshot-v1" && m.contains("step") &&
      m["step"].is_number_integer() && m.contains("epoch") && m["epoch"].is_number_integer() &&
      m.contains("batch") && m["batch"].is_number_integer() && m.contains("losses") &&
      m["losses"].is_array() &&
      std::all_of(m["losses"].begin(), m["losses"].end(),
                  [](const nlohmann::json& x) { return x.is_number(); }) &&
      m.contains("run") && m["run"].is_object() && m["run"].contains("model") &&
      m["run"]["model"].is_object() && m["run"]["model"].contains("name") &&
      m["run"]["model"]["name"].is_string() && (!m.contains("run_id") || m["run_id"].is_string()) &&
      (!m.contains("shards") ||
       (m["shards"].is_object() &&
        std::all_of(m["shards"].begin(), m["shards"].end(),
                    [](const nlohmann::json& x) { return x.is_string(); }))) &&
      valid_loss_scale(m);
  GPIPE_CHECK(valid, InputError, "'", path, "' is corrupt or not a gpipe snapshot manifest");
  for (const char* key : {"step", "epoch", "batch"}) {
    GPIPE_CHECK(m[key].get<int64_t>() >= 0, InputError, "'", path, "' is corrupt: its ", key,
                " is ", m[key].get<int64_t>(), ", below 0");
  }
}

// The manifest's model description must match the run's, except knobs that leave the
// parameters alone.
void check_same_model(const nlohmann::json& saved, const nlohmann::json& run,
                      const std::string& path, bool allow_classes) {
  const auto& a = saved.at("run").at("model");
  const auto& b = run.at("model");
  for (const char* key : {"name", "layers", "filters", "channels", "d_model", "ffn", "heads",
                          "vocab", "width", "in_features", "batch_norm"}) {
    if (!a.contains(key) || !b.contains(key)) continue;
    GPIPE_CHECK(a[key] == b[key], ConfigError, "the snapshot '", path, "' is of model ",
                a["name"].get<std::string>(), " with ", key, "=", a[key].dump(),
                " but this run builds ", b["name"].get<std::string>(), " with ", key, "=",
                b[key].dump());
  }
  if (!allow_classes) {
    const auto saved_classes = a.value("classes", nlohmann::json());
    const auto run_classes = b.value("classes", nlohmann::json());
    GPIPE_CHECK(saved_classes == run_classes, ConfigError, "the snapshot '", path, "' has ",
                saved_classes.dump(), " classes but this run has ", run_classes.dump(),
                "; use --finetune-from to start a new classifier");
  }
}

}  // namespace

SnapshotManager::SnapshotManager(std::string dir, int64_t keep, FolderUse use, World& world)
    : dir_(std::move(dir)), keep_(keep), world_(world), run_id_(new_run_id()) {
  GPIPE_CHECK(keep_ >= 1, ConfigError, "--keep-snapshots must be >= 1, got ", keep_);
  std::error_code error;
  fs::create_directories(dir_, error);
  GPIPE_CHECK(fs::is_directory(dir_), ConfigError, "cannot create snapshot folder '", dir_, "'");
  // One writer per folder for the whole run: a second run would interleave its snapshots with
  // this one's, and the pruning of each would delete the other's chain.
  if (world_.rank() == 0) {
    lock_ = std::make_unique<FileLock>((fs::path(dir_) / kLock).string(),
                                       "--snapshot-dir '" + dir_ + "'");
  }
  // A process that died while saving left a half-written folder: it was never complete, so it
  // can go.
  if (world_.rank() == 0) {
    for (const auto& e : fs::directory_iterator(dir_)) {
      const auto name = e.path().filename().string();
      if (name.rfind(".step-", 0) == 0 && name.size() > 4 &&
          name.substr(name.size() - 4) == ".tmp") {
        spdlog::warn("removing {}: a snapshot whose writing never finished", e.path().string());
        fs::remove_all(e.path());
      } else if (name.rfind(std::string(kLatest) + ".tmp.", 0) == 0) {
        fs::remove(e.path());  // a `latest` whose writing never finished (files.h's write_file)
      }
    }
  }
  if (use == FolderUse::kResume) return;
  const auto found = candidates();
  if (found.empty()) return;
  const auto newest = describe_run(read_manifest(found.front()));
  GPIPE_CHECK(use == FolderUse::kOverwrite, ConfigError, "--snapshot-dir '", dir_, "' holds ",
              found.size(), " snapshot(s) of another run (the newest ", found.front(), ": ", newest,
              "); continue that run with --resume, choose another --snapshot-dir, or "
              "pass --overwrite-snapshots to delete them");
  world_.barrier();  // every rank has looked before rank 0 deletes
  if (world_.rank() == 0) {
    spdlog::warn("--overwrite-snapshots: deleting {} snapshot(s) in {} (the newest: {})",
                 found.size(), dir_, newest);
    for (const auto& path : found)
      fs::remove_all(path);
    fs::remove(fs::path(dir_) / kLatest, error);
  }
  world_.barrier();
}

std::string SnapshotManager::save(Pipeline& pipeline, const RunPosition& position,
                                  const nlohmann::json& run) {
  const auto tmp_dir = fs::path(dir_) / ("." + folder_name(position.step) + ".tmp");
  try {
    return write(pipeline, position, run, tmp_dir);
  } catch (const std::exception& e) {
    // A failed write (a full disk, a file-size limit) must not leave the folder fuller: drop
    // the half-written snapshot; `latest` still names the previous complete one.
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    const auto previous = latest();
    throw Error(c10::str("saving the snapshot of step ", position.step, " in '", dir_,
                         "' failed: ", error_message(e), "; ",
                         previous ? "the previous snapshot " + *previous + " is intact"
                                  : std::string("no earlier snapshot exists")));
  }
}

std::string SnapshotManager::write(Pipeline& pipeline, const RunPosition& position,
                                   const nlohmann::json& run, const fs::path& tmp_dir) {
  const bool lead = world_.rank() == 0;
  const auto final_dir = fs::path(dir_) / folder_name(position.step);
  if (lead) {
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  }
  world_.barrier();
  ShardChecksums checksums;
  if (world_.replica() == 0) {
    checksums = save_stage_shards(pipeline, tmp_dir.string());
    if (fault_injected("crash-during-save")) {
      spdlog::error("fault injection: dying in the middle of writing {}", tmp_dir.string());
      std::_Exit(137);
    }
    // Holds the half-written folder open for 200 ms, so a test's kill lands inside a save
    // whatever the machine's load.
    if (fault_injected("slow-save")) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  world_.barrier();
  if (lead) {
    nlohmann::json manifest = {
        {"format", "gpipe-snapshot-v1"},
        {"run_id", run_id_},
        {"step", position.step},
        {"epoch", position.epoch},
        {"batch", position.batch},
        {"losses", position.losses},
        {"stages", pipeline.num_stages()},
        {"balance", pipeline.options().balance()},
        {"optimizer", pipeline.has_optimizer()
                          ? optimizer_kind(pipeline.optimizer(pipeline.local_stages().front()))
                          : "none"},
        {"run", run}};
    if (pipeline.loss_scaler().enabled()) manifest["loss_scale"] = loss_scale_json(pipeline);
    // Every shard's checksum: this process's from the bytes it wrote, the other ranks' (in a
    // distributed run) read back from the folder once they are all written.
    for (const auto& e : fs::directory_iterator(tmp_dir)) {
      const auto file = e.path().filename().string();
      if (file.rfind("stage-", 0) == 0 && e.path().extension() == ".pt" && !checksums.count(file))
        checksums[file] = file_checksum(e.path().string());
    }
    manifest["shards"] = checksums;
    write_json_file((tmp_dir / kManifest).string(), manifest);
    fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
    write_file((fs::path(dir_) / kLatest).string(), folder_name(position.step) + "\n");
    prune();
  }
  world_.barrier();
  return final_dir.string();
}

void SnapshotManager::prune() const {
  std::vector<fs::path> own;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const auto name = e.path().filename().string();
    if (!e.is_directory() || !is_snapshot_name(name)) continue;
    nlohmann::json manifest;
    try {
      manifest = read_manifest(e.path());
    } catch (const InputError&) {
      continue;  // not a readable manifest: not provably this run's, so left alone
    }
    if (manifest.is_object() && manifest.value("run_id", "") == run_id_) own.push_back(e.path());
  }
  sort_newest_first(own);
  for (size_t i = static_cast<size_t>(keep_); i < own.size(); ++i)
    fs::remove_all(own[i]);
}

std::vector<std::string> SnapshotManager::candidates() const {
  std::vector<std::string> found;
  if (const auto newest = latest()) found.push_back(*newest);
  std::vector<fs::path> complete;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const auto name = e.path().filename().string();
    if (e.is_directory() && is_snapshot_name(name) && fs::exists(e.path() / kManifest))
      complete.push_back(e.path());
  }
  sort_newest_first(complete);
  for (const auto& path : complete) {
    if (found.empty() || path.string() != found.front()) found.push_back(path.string());
  }
  return found;
}

nlohmann::json SnapshotManager::resume(Pipeline& pipeline, const nlohmann::json& run,
                                       std::string* loaded_from) {
  const auto found = candidates();
  GPIPE_CHECK(!found.empty(), ConfigError, "--resume: no complete snapshot in '", dir_,
              "' (nothing to resume; drop --resume to start afresh)");
  std::vector<std::string> unusable, reasons;
  for (const auto& path : found) {
    try {
      // The settings a resume keeps are compared before any weight is loaded.
      auto manifest = read_manifest(path);
      if (manifest.is_object()) {
        check_resume_settings(manifest.value("run", nlohmann::json()), run, path);
      }
      restore(pipeline, path, manifest, LoadOptions(), run);
      if (!unusable.empty()) {
        spdlog::warn("resuming from {}, the newest valid snapshot, instead of the unusable {}",
                     path, c10::Join(", ", unusable));
      }
      if (loaded_from != nullptr) *loaded_from = path;
      // The run goes on: its new snapshots are its own, and so are the ones it resumes from
      // (a snapshot of an older format has no id; pruning then leaves it alone).
      if (manifest.contains("run_id")) run_id_ = manifest["run_id"].get<std::string>();
      return manifest;
    } catch (const InputError& e) {
      // Corrupt or truncated: an older snapshot may still be whole. A snapshot of another
      // model (ConfigError) is not a fault of the file, and stops the run.
      spdlog::warn("snapshot {} is unusable: {}", path, error_message(e));
      unusable.push_back(path);
      reasons.push_back(error_message(e));
    }
  }
  throw InputError(c10::str("--resume: no valid snapshot in '", dir_,
                            "': ", c10::Join("; ", reasons),
                            " (delete them or drop --resume to start afresh)"));
}

std::optional<std::string> SnapshotManager::latest() const {
  const auto name = read_latest(dir_);
  if (!is_snapshot_name(name)) return std::nullopt;
  const auto path = fs::path(dir_) / name;
  if (!fs::exists(path / kManifest)) return std::nullopt;
  return path.string();
}

std::string SnapshotManager::resolve(const std::string& path) {
  GPIPE_CHECK(fs::exists(path), ConfigError, "snapshot '", path, "' does not exist");
  if (fs::exists(fs::path(path) / kManifest)) return path;
  const auto name = read_latest(path);
  GPIPE_CHECK(!name.empty(), ConfigError, "'", path,
              "' is neither a snapshot (no manifest.json) nor a snapshot folder (no latest)");
  GPIPE_CHECK(is_snapshot_name(name), InputError, "'", path, "/latest' names '", name,
              "', which is not a snapshot of this folder (step- and 8 or more digits)");
  const auto resolved = (fs::path(path) / name).string();
  GPIPE_CHECK(fs::exists(fs::path(resolved) / kManifest), ConfigError, "'", path, "/latest' names ",
              name, ", which is incomplete or gone");
  return resolved;
}

nlohmann::json SnapshotManager::load(Pipeline& pipeline, const std::string& path,
                                     const LoadOptions& options, const nlohmann::json& run,
                                     LoadReport* report) {
  const auto dir = resolve(path);
  const auto manifest = read_manifest(dir);
  const auto loaded = restore(pipeline, dir, manifest, options, run);
  if (report != nullptr) *report = loaded;
  return manifest;
}

LoadReport SnapshotManager::restore(Pipeline& pipeline, const std::string& dir,
                                    const nlohmann::json& manifest, const LoadOptions& options,
                                    const nlohmann::json& run) {
  check_manifest(manifest, (fs::path(dir) / kManifest).string());
  check_same_model(manifest, run, dir, options.skip_mismatched_shapes());
  auto checked = options;
  if (manifest.contains("shards")) checked.checksums(manifest["shards"].get<ShardChecksums>());
  auto report = load_stage_shards(pipeline, dir, checked);
  // A resume continues with the saved scale and counts; a fine-tune starts a fresh scaler.
  if (options.optimizer() && manifest.contains("loss_scale") && pipeline.loss_scaler().enabled()) {
    const auto& s = manifest["loss_scale"];
    LossScaleState state;
    state.scale = s["scale"].get<double>();
    state.good_steps = s["good_steps"].get<int64_t>();
    state.skipped_steps = s["skipped_steps"].get<int64_t>();
    pipeline.loss_scaler().load(state);
  }
  return report;
}

}  // namespace gpipe::train
