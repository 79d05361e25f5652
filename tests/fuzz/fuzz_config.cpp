// Fuzz target: the TOML preset/config loader, i.e. gpipe_train's flags read from a --config file
// (experiments/presets/*.toml are such files). A bad file must end in CLI11's parse errors or
// ConfigError, never a crash or an exception of another type.
#include <CLI/CLI.hpp>

#include "fuzz_util.h"
#include "gpipe/errors.h"
#include "train/train_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = gpipe::fuzz::scratch() / "preset.toml";
  gpipe::fuzz::write_file(path, data, size);
  CLI::App app{"fuzz"};
  app.set_config("--config", "", "TOML file of flags");
  app.allow_config_extras(false);
  gpipe::train::TrainOptions options;
  gpipe::train::add_train_flags(app, options);
  std::string program = "gpipe_train", flag = "--config", file = path.string();
  char* argv[] = {program.data(), flag.data(), file.data()};
  try {
    app.parse(3, argv);
    options.to_json();
  } catch (const CLI::Error&) {
  } catch (const gpipe::Error&) {
  }
  return 0;
}
