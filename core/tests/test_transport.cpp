#include <gtest/gtest.h>

#include <thread>

#include "test_util.h"

namespace gpipe::testing {
namespace {

TEST(LocalTransport, DeliversByKeyInAnyOrder) {
  LocalTransport transport;
  transport.send(0, 1, {0, 0, 1, 1, Direction::kForward}, {torch::ones({1})});
  transport.send(0, 1, {0, 0, 1, 0, Direction::kForward}, {torch::zeros({1})});
  EXPECT_EQ(transport.recv(0, 1, {0, 0, 1, 0, Direction::kForward})[0].item<float>(), 0);
  EXPECT_EQ(transport.recv(0, 1, {0, 0, 1, 1, Direction::kForward})[0].item<float>(), 1);
}

TEST(LocalTransport, RecvBlocksUntilSend) {
  LocalTransport transport;
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    transport.send(1, 0, {3, 1, 0, 2, Direction::kBackward}, {torch::full({1}, 5.0)});
  });
  EXPECT_EQ(transport.recv(1, 0, {3, 1, 0, 2, Direction::kBackward})[0].item<float>(), 5);
  sender.join();
}

TEST(LocalTransport, AbortWakesBlockedReceivers) {
  LocalTransport transport;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    transport.abort("stage 3 failed");
  });
  try {
    transport.recv(0, 1, {});
    FAIL();
  } catch (const AbortedError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 3"), std::string::npos);
  }
  aborter.join();
  transport.reset();
  transport.send(0, 1, {}, {torch::ones({1})});
  EXPECT_EQ(transport.recv(0, 1, {}).size(), 1u);
}

}  // namespace
}  // namespace gpipe::testing
