// gpipe_train: trains a model with the GPipe engine.
//
//   gpipe_train --preset fashion-mnist-cpu --output-dir runs/fmnist      # what run_amoebanet.sh
//   runs gpipe_train --model amoebanet-d --layers 6 --filters 16 --dataset cifar10 --data-dir DIR
//               --partitions 2 --chunks 4 --epochs 10 --snapshot-dir ckpt --save-every 500
//   gpipe_train --model transformer-l --optimizer adam --partitions 4 --chunks 8 --steps 100
//   scripts/launch.sh --nproc-per-node 2 -- gpipe_train --distributed --balance 3,3 ...
//
// Any flag may also come from a TOML file (--config FILE) or a preset of experiments/presets
// (--preset NAME); flags on the command line win. Exit status: 0 done, 2 bad flags or data,
// 1 a failure while training (a non-finite loss included; the last good snapshot is kept).
#include <spdlog/spdlog.h>

#include <filesystem>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/models/model_flags.h"
#include "gpipe/timeline.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  using namespace gpipe;
  CLI::App app{
      "gpipe_train: trains AmoebaNet, Transformer-L and test models with GPipe pipeline "
      "parallelism, on CPU virtual devices, CUDA devices or separate processes"};
  app.set_config("--config", "", "TOML file of flags (keys are flag names without dashes)");
  app.allow_config_extras(false);  // an unknown key in a preset is an error
  app.add_option("--preset", "a preset of experiments/presets (its .toml name); same as --config")
      ->group("Presets");
  train::TrainOptions options;
  train::add_train_flags(app, options);

  return train::run_with_presets(app, argc, argv, [&] {
    spdlog::set_level(spdlog::level::from_str(options.log_level));
    models::warn_ignored_model_flags(app, options.model);
    train::Trainer trainer(options);
    try {
      const auto result = [&] {
        try {
          return trainer.run();
        } catch (const std::exception& e) {
          trainer.abort_peers(describe_exception(std::current_exception()));
          throw;
        }
      }();
      if (!trainer.reports()) return cli::kExitOk;
      if (result.final_evaluation) {
        spdlog::info("final test top-1 {:.2f}%, top-5 {:.2f}%", result.final_evaluation->top1 * 100,
                     result.final_evaluation->top5 * 100);
      }
      spdlog::info("{} steps in {:.1f} s: {:.1f} samples/s, bubble {:.3f} (last step)",
                   result.steps, result.train_seconds, result.throughput_samples_per_s,
                   result.bubble_fraction);
      // A resume of a finished run trains nothing: a summary it would write over stays as it
      // was (one written now would say 0 samples/s), and a new one is written.
      const auto& json_path = trainer.options().json;
      const bool keep = trainer.options().resume && result.step_seconds.empty() &&
                        !json_path.empty() && std::filesystem::exists(json_path);
      if (keep) spdlog::info("the run had already finished: {} is kept as it was", json_path);
      if (!json_path.empty() && !keep) {
        auto json = result.to_json();
        json["config"] = trainer.options().to_json();
        json["command"] = cli::command_line(argc, argv);
        json["environment"] = arithmetic_environment();
        write_json_file(trainer.options().json, json);
      }
      return cli::kExitOk;
    } catch (const train::TrainingStopped& e) {
      spdlog::error("{}", error_message(e));
      return cli::kExitFailure;
    }
  });
}
