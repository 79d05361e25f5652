// The paper's two models on CUDA, run by scripts/gpu_check.sh on a machine with a GPU and
// skipped elsewhere: a small AmoebaNet-D and a small Transformer-L train a few steps as two
// stages on cuda:0 (M=4, recompute except the last micro-batch), their losses stay finite and
// every parameter stays on the GPU. With GPIPE_GPU_CHECK_OUT set, each writes its Chrome trace
// and a JSON summary (losses, step times, peak bytes per stage) there.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpipe/models/registry.h"
#include "model_test_util.h"

namespace gpipe::models::testing {
namespace {

ModelConfig small(const std::string& name) {
  ModelConfig config(name);
  if (std::holds_alternative<AmoebaNetOptions>(config.options())) {
    config.amoebanet().layers(3).filters(32).image_size(64).classes(10);
  } else {
    config.transformer().layers(4).d_model(256).ffn(1024).heads(4).seq_len(128).vocab(1000);
  }
  return config;
}

class CudaModels : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModels, TrainAsTwoStagesOnOneGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device (scripts/gpu_check.sh)";
  const auto config = small(GetParam());
  const auto builder = make_model(config);
  const int64_t n = builder->num_layers();
  Pipeline pipe(builder->build(),
                PipelineOptions(even_balance(n, 2))
                    .devices({"cuda:0", "cuda:0"})
                    .chunks(4)
                    .checkpoint(Checkpoint::kExceptLast)
                    .measure_memory(true),
                builder->loss());
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01));
  });
  constexpr int kSteps = 5;
  nlohmann::json steps = nlohmann::json::array();
  for (int step = 0; step < kSteps; ++step) {
    const auto batch = builder->sample_batch(32, static_cast<uint64_t>(step));
    const double loss = pipe.train_step(batch.input, batch.target);
    ASSERT_TRUE(std::isfinite(loss)) << GetParam() << " step " << step;
    const auto& stats = pipe.last_step();
    steps.push_back({{"step", step},
                     {"loss", loss},
                     {"step_ms", 1e3 * stats.seconds},
                     {"bubble_fraction", stats.bubble_fraction},
                     {"peak_bytes", stats.peak_bytes}});
  }
  for (const auto& [name, p] : pipe.named_parameters())
    ASSERT_TRUE(p.is_cuda()) << name;
  if (const char* out = std::getenv("GPIPE_GPU_CHECK_OUT")) {
    const std::string stem = std::string(out) + "/" + GetParam();
    pipe.timeline().write_chrome_trace(stem + "-trace.json");
    write_json_file(stem + ".json", {{"model", to_json(config)},
                                     {"balance", even_balance(n, 2)},
                                     {"devices", {"cuda:0", "cuda:0"}},
                                     {"chunks", 4},
                                     {"checkpoint", "except_last"},
                                     {"batch_size", 32},
                                     {"steps", steps}});
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaModels, ::testing::Values("amoebanet-d", "transformer-l"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace gpipe::models::testing
