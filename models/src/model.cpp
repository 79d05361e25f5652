// ModelBuilder's shared machinery: deterministic per-layer initialisation and counting.
#include "gpipe/models/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "gpipe/errors.h"

namespace gpipe::models {
namespace {

// Serialises every build_layer in the process: each one reseeds the shared default generator.
std::mutex& build_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Restores the default CPU generator's state when it goes out of scope.
class DefaultGeneratorStateGuard {
 public:
  DefaultGeneratorStateGuard() : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~DefaultGeneratorStateGuard() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }
  DefaultGeneratorStateGuard(const DefaultGeneratorStateGuard&) = delete;
  DefaultGeneratorStateGuard& operator=(const DefaultGeneratorStateGuard&) = delete;

 private:
  at::Generator generator_;
  torch::Tensor state_;
};

// The seed of layer i: the engine's splitmix mixing, with a key that no dropout stream uses.
constexpr int64_t kInitStep = -1;

}  // namespace

void ModelBuilder::check_layer_index(int64_t i) const {
  GPIPE_CHECK(i >= 0 && i < num_layers(), ConfigError, name(), " has ", num_layers(),
              " layers; layer index ", i, " is out of range");
}

LayerPtr ModelBuilder::build_layer(int64_t i) const {
  check_layer_index(i);
  std::lock_guard<std::mutex> lock(build_mutex());
  DefaultGeneratorStateGuard restore;
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> generator_lock(generator.mutex());
    generator.set_current_seed(mix_seed(init_seed_, kInitStep, /*microbatch=*/0, i));
  }
  auto layer = make_layer(i);
  layer->set_label(layer_name(i));
  return layer;
}

LayerList ModelBuilder::build_range(int64_t begin, int64_t end) const {
  GPIPE_CHECK(0 <= begin && begin <= end && end <= num_layers(), ConfigError, name(), " has ",
              num_layers(), " layers; range [", begin, ", ", end, ") is not within [0, ",
              num_layers(), "]");
  LayerList layers;
  layers.reserve(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i)
    layers.push_back(build_layer(i));
  return layers;
}

int64_t ModelBuilder::count_layer_parameters(int64_t i) const {
  return gpipe::count_parameters({build_layer(i)});
}

std::vector<int64_t> ModelBuilder::layer_parameters() const {
  std::vector<int64_t> counts;
  counts.reserve(static_cast<size_t>(num_layers()));
  for (int64_t i = 0; i < num_layers(); ++i)
    counts.push_back(count_layer_parameters(i));
  return counts;
}

int64_t ModelBuilder::count_parameters() const {
  int64_t total = 0;
  for (const auto count : layer_parameters())
    total += count;
  return total;
}

}  // namespace gpipe::models
