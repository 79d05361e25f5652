#include "train/snapshot_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
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
#include "gpipe/timeline.h"

namespace gpipe::train {
namespace {

namespace fs = std::filesystem;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kLatest = "latest";

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

std::string new_run_id() {
  std::random_device device;
  std::uniform_int_distribution<uint64_t> draw;
  char id[20];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(draw(device)));
  return id;
}

// The manifest of the snapshot folder `dir`, or null when it does not parse.
nlohmann::json read_manifest(const fs::path& dir) {
  std::ifstream in(dir / kManifest);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
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

void write_text_atomically(const fs::path& path, const std::string& text) {
  const auto tmp = fs::path(path.string() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    GPIPE_CHECK(out.good(), Error, "cannot write '", tmp.string(), "'");
  }
  fs::rename(tmp, path);
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
      m["run"]["model"]["name"].is_string() && (!m.contains("run_id") || m["run_id"].is_string());
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
  // A process that died while saving left a half-written folder: it was never complete, so it
  // can go.
  if (world_.rank() == 0) {
    for (const auto& e : fs::directory_iterator(dir_)) {
      const auto name = e.path().filename().string();
      if (name.rfind(".step-", 0) == 0 && name.size() > 4 &&
          name.substr(name.size() - 4) == ".tmp") {
        spdlog::warn("removing {}: a snapshot whose writing never finished", e.path().string());
        fs::remove_all(e.path());
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
  if (world_.replica() == 0) {
    save_stage_shards(pipeline, tmp_dir.string());
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
    write_json_file((tmp_dir / kManifest).string(), manifest);
    fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
    write_text_atomically(fs::path(dir_) / kLatest, folder_name(position.step) + "\n");
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
    const auto manifest = read_manifest(e.path());
    if (manifest.is_object() && manifest.value("run_id", "") == run_id_) own.push_back(e.path());
  }
  std::sort(own.begin(), own.end());
  for (size_t i = 0; i + keep_ < own.size(); ++i)
    fs::remove_all(own[i]);
}

std::vector<std::string> SnapshotManager::candidates() const {
  std::vector<std::string> found;
  if (const auto newest = latest()) found.push_back(*newest);
  std::vector<std::string> complete;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const auto name = e.path().filename().string();
    if (e.is_directory() && is_snapshot_name(name) && fs::exists(e.path() / kManifest))
      complete.push_back(e.path().string());
  }
  std::sort(complete.rbegin(), complete.rend());
  for (const auto& path : complete) {
    if (found.empty() || path != found.front()) found.push_back(path);
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
      auto manifest = load(pipeline, path, LoadOptions(), run);
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
  std::ifstream in(fs::path(dir_) / kLatest);
  std::string name;
  if (!(in >> name) || !is_snapshot_name(name)) return std::nullopt;
  const auto path = fs::path(dir_) / name;
  if (!fs::exists(path / kManifest)) return std::nullopt;
  return path.string();
}

std::string SnapshotManager::resolve(const std::string& path) {
  GPIPE_CHECK(fs::exists(path), ConfigError, "snapshot '", path, "' does not exist");
  if (fs::exists(fs::path(path) / kManifest)) return path;
  std::ifstream in(fs::path(path) / kLatest);
  std::string name;
  GPIPE_CHECK(static_cast<bool>(in >> name), ConfigError, "'", path,
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
  check_manifest(manifest, (fs::path(dir) / kManifest).string());
  check_same_model(manifest, run, dir, options.skip_mismatched_shapes());
  const auto loaded = load_stage_shards(pipeline, dir, options);
  if (report != nullptr) *report = loaded;
  return manifest;
}

}  // namespace gpipe::train
