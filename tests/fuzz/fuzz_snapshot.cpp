// Fuzz target: the snapshot loader, both its parts. The first byte picks which file the rest
// of the input replaces in an otherwise valid snapshot of a small MLP: the manifest
// (manifest.json, read by the trainer's SnapshotManager) or a stage shard (stage-0.pt, read
// by core's load_stage_shards through LibTorch's archive reader). A bad file must end in
// ConfigError or InputError naming it, never a crash or an exception of another type.
#include <filesystem>

#include "fuzz_util.h"
#include "gpipe/errors.h"
#include "gpipe/models/mlp.h"
#include "gpipe/snapshot.h"
#include "train/snapshot_manager.h"

namespace {

namespace fs = std::filesystem;
using namespace gpipe;

struct Fixture {
  Fixture() : pipeline(models::make_mlp(models::MlpOptions(4, 8, 3, 3)), PipelineOptions({2, 2})) {
    pipeline.set_optimizer([](std::vector<torch::Tensor> p) {
      return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
    });
    pipeline.train_step(torch::randn({4, 4}), torch::randint(0, 3, {4}));
    // A valid snapshot: the shards, a manifest written by the manager, and the run's model.
    train::SnapshotManager manager((fuzz::scratch() / "ck").string(), 1,
                                   train::FolderUse::kOverwrite, single_process_world());
    run = {{"model", {{"name", "mlp"}, {"layers", 3}, {"width", 8}, {"classes", 3}}}};
    valid = manager.save(pipeline, train::RunPosition{1, 0, 1, {1.0}}, run);
  }
  Pipeline pipeline;
  nlohmann::json run;
  std::string valid;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  if (size < 1) return 0;
  const auto dir = fuzz::scratch() / "input";
  fs::remove_all(dir);
  fs::copy(fixture.valid, dir);
  const bool manifest = (data[0] & 1) != 0;
  fuzz::write_file(dir / (manifest ? "manifest.json" : "stage-0.pt"), data + 1, size - 1);
  try {
    train::SnapshotManager::load(fixture.pipeline, dir.string(), LoadOptions(), fixture.run);
  } catch (const ConfigError&) {
  } catch (const InputError&) {
  }
  return 0;
}
