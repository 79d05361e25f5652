// Every schedule against the plain model: with dropout and deferred BatchNorm, K in {1, 2, 4},
// M in {1, 4, 8} and every checkpoint mode, one SGD step of the pipeline leaves the same
// gradients and the same updated parameters as the plain model stepping micro-batch by
// micro-batch under the same keys. Combinations a schedule cannot run are ConfigErrors.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::testing {
namespace {

using Params = std::tuple<ScheduleKind, int64_t, int64_t, Checkpoint>;

class ScheduleTransparency : public ::testing::TestWithParam<Params> {};

// Why a combination cannot run, or "" when it can.
std::string unsupported(ScheduleKind kind, int64_t K, int64_t M) {
  const auto why = schedule_shape_error(kind, K, M, default_virtual_stages(kind));
  if (why.empty()) return "";
  // The values the message must name: the V's K, or the M a kind's rounds need.
  return why.find("got K=") != std::string::npos ? "K=" + std::to_string(K)
                                                 : "M=" + std::to_string(M);
}

TEST_P(ScheduleTransparency, GradientsAndUpdatedParametersEqualThePlainModel) {
  // Named copies, not a structured binding: C++17 lambdas cannot capture bindings (clang).
  const auto kind = std::get<0>(GetParam());
  const auto K = std::get<1>(GetParam());
  const auto M = std::get<2>(GetParam());
  const auto checkpoint = std::get<3>(GetParam());
  // 8 layers: every device gets a multiple of v = 2 at K = 1, 2, 4.
  const auto options = models::MlpOptions(12, 16, 7, 5).dropout(0.2).batch_norm(true);
  constexpr uint64_t kSeed = 17;
  constexpr double kLr = 0.1;
  torch::manual_seed(3);
  const auto input = torch::randn({16, 12});
  const auto target = torch::randint(0, 5, {16});

  auto layers = seeded_mlp(options);
  auto make = [&] {
    return std::make_unique<Pipeline>(layers, PipelineOptions(even_balance(8, K))
                                                  .chunks(M)
                                                  .checkpoint(checkpoint)
                                                  .schedule(kind)
                                                  .seed(kSeed)
                                                  .threads_per_device(1));
  };
  const auto why = unsupported(kind, K, M);
  if (!why.empty()) {
    EXPECT_CONFIG_ERROR(make(), why);
    return;
  }
  auto plain = seeded_mlp(options);
  const double plain_loss = plain_microbatched_step(plain, input, target, M, kSeed, 0);
  auto pipe = make();
  pipe->set_optimizer([&](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(kLr));
  });
  const double loss = pipe->train_step(input, target);
  EXPECT_NEAR(loss, plain_loss, 1e-5 * std::abs(plain_loss) + 1e-6);

  const auto reference = named_tensors(plain);
  for (const auto& [name, p] : pipe->named_parameters()) {
    const auto& q = reference.at(name);
    expect_close(p.grad(), q.grad(), 1e-4, 1e-6, name + " gradient");
    torch::NoGradGuard no_grad;
    expect_close(p, q - kLr * q.grad(), 1e-5, 1e-6, name + " after the step");
  }
  for (const auto& [name, b] : pipe->named_buffers()) {
    if (b.is_floating_point()) expect_close(b, reference.at(name), 1e-5, 1e-6, name);
  }
}

INSTANTIATE_TEST_SUITE_P(EverySchedule, ScheduleTransparency,
                         ::testing::Combine(::testing::ValuesIn(all_schedule_kinds()),
                                            ::testing::Values(1, 2, 4), ::testing::Values(1, 4, 8),
                                            ::testing::Values(Checkpoint::kAlways,
                                                              Checkpoint::kExceptLast,
                                                              Checkpoint::kNever)),
                         [](const auto& info) {
                           std::string name = to_string(std::get<0>(info.param)) + "_K" +
                                              std::to_string(std::get<1>(info.param)) + "_M" +
                                              std::to_string(std::get<2>(info.param)) + "_" +
                                              to_string(std::get<3>(info.param));
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace gpipe::testing
