#include <gtest/gtest.h>

#include <chrono>

#include "gpipe/errors.h"
#include "gpipe/models/sleep.h"

namespace gpipe::models {
namespace {

TEST(SleepModel, SleepsInForwardAndTwiceAsLongInBackward) {
  const auto layers = make_sleep_model(SleepOptions(2, 10));
  auto x = torch::ones({3, 2});
  const auto t0 = std::chrono::steady_clock::now();
  Activations y{x};
  for (const auto& layer : layers)
    y = layer->forward(y);
  const auto t1 = std::chrono::steady_clock::now();
  y[0].sum().backward();
  const auto t2 = std::chrono::steady_clock::now();
  using ms = std::chrono::duration<double, std::milli>;
  EXPECT_GE(ms(t1 - t0).count(), 20);
  EXPECT_GE(ms(t2 - t1).count(), 40);
  for (const auto& layer : layers) {
    EXPECT_NEAR(layer->parameters()[0].grad().item<double>(), 6.0, 1e-9);  // sum of x
  }
}

TEST(SleepModel, BadOptions) {
  EXPECT_THROW(make_sleep_model(SleepOptions(0, 1)), ConfigError);
  EXPECT_THROW(make_sleep_model(SleepOptions(2, -1)), ConfigError);
}

}  // namespace
}  // namespace gpipe::models
