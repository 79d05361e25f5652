// gpipe_train: trains a model with the GPipe engine.
//
//   gpipe_train --model mlp --layers 8 --width 512 --partitions 2 --chunks 8 --steps 20
//   gpipe_train --model sleep --layers 8 --layer-ms 4 --partitions 4 --chunks 8 --trace t.json
#include <spdlog/spdlog.h>

#include "common/cli.h"
#include "gpipe/timeline.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"gpipe_train: pipeline-parallel training with GPipe"};
  gpipe::train::TrainOptions options;
  gpipe::train::add_train_flags(app, options);
  return gpipe::cli::run_main(app, argc, argv, [&] {
    gpipe::train::Trainer trainer(options);
    const auto result = trainer.run();
    if (trainer.reports()) spdlog::info("throughput {:.1f} samples/s, bubble {:.3f} (last step)",
                 result.throughput_samples_per_s, result.bubble_fraction);
    if (!options.json.empty() && trainer.reports()) {
      auto json = result.to_json();
      json["model"] = options.model.name;
      json["chunks"] = options.chunks;
      json["schedule"] = options.schedule;
      json["checkpoint"] = options.checkpoint;
      json["batch_size"] = options.batch_size;
      gpipe::write_json_file(options.json, json);
    }
    return gpipe::cli::kExitOk;
  });
}
