#include "gpipe/layer.h"

#include <ATen/CPUGeneratorImpl.h>
#ifdef GPIPE_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "gpipe/errors.h"

namespace gpipe {

ModuleLayer::ModuleLayer(std::string name, torch::nn::AnyModule module)
    : Layer(std::move(name)), module_(std::move(module)) {
  register_module("module", module_.ptr());
}

Activations ModuleLayer::forward(const Activations& inputs) {
  GPIPE_CHECK(inputs.size() == 1, ConfigError, "layer '", label(),
              "' wraps a single-tensor module but received ", inputs.size(),
              " tensors; write a Layer subclass for layers that take several");
  return {module_.forward<torch::Tensor>(inputs[0])};
}

FunctionLayer::FunctionLayer(std::string name, Function fn)
    : Layer(std::move(name)), fn_(std::move(fn)) {}

LayerPtr make_function_layer(std::string name, FunctionLayer::Function fn) {
  return std::make_shared<FunctionLayer>(std::move(name), std::move(fn));
}

int64_t count_parameters(const LayerList& layers) {
  int64_t total = 0;
  for (const auto& layer : layers) {
    for (const auto& p : layer->parameters())
      total += p.numel();
  }
  return total;
}

namespace {
thread_local LayerContext* tls_context = nullptr;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t mix_seed(uint64_t seed, int64_t step, int64_t microbatch, int64_t layer) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<uint64_t>(step));
  h = splitmix64(h ^ static_cast<uint64_t>(microbatch));
  h = splitmix64(h ^ static_cast<uint64_t>(layer));
  return h;
}

at::Generator& LayerContext::generator(const torch::Device& device) {
  const uint64_t key = mix_seed(seed, step, microbatch, layer);
#ifdef GPIPE_WITH_CUDA
  if (device.is_cuda()) {
    if (!cuda_generator_) {
      cuda_generator_ = at::cuda::detail::createCUDAGenerator(device.index());
      cuda_generator_->set_current_seed(key);
    }
    return *cuda_generator_;
  }
#else
  GPIPE_CHECK(!device.is_cuda(), ConfigError, "a random layer runs on ", device,
              " but this build of gpipe has no CUDA support");
#endif
  if (!cpu_generator_) cpu_generator_ = at::make_generator<at::CPUGeneratorImpl>(key);
  return *cpu_generator_;
}

LayerContext* current_layer_context() {
  return tls_context;
}

LayerContextGuard::LayerContextGuard(LayerContext* context) : previous_(tls_context) {
  tls_context = context;
}

LayerContextGuard::~LayerContextGuard() {
  tls_context = previous_;
}

}  // namespace gpipe
