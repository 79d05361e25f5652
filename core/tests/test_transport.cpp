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

TEST(LinkModel, ScalingSlowsBandwidthAndLatencyByTheFactor) {
  const auto pcie = link_preset("pcie");
  const auto slow = pcie.scaled(0.01);
  EXPECT_DOUBLE_EQ(slow.bandwidth, 12e9 * 0.01);
  EXPECT_DOUBLE_EQ(slow.latency, 10e-6 / 0.01);
  EXPECT_DOUBLE_EQ(slow.transfer_time_of(120e6), 1e-3 + 1.0);
  EXPECT_THROW(pcie.scaled(0), ConfigError);
  EXPECT_TRUE(link_preset("none").free());
  EXPECT_FALSE(pcie.free());
}

// A link of 30 ms a message and 1 MB/s (4 KB: 4 ms more) between devices 0 and 1.
LinkModel slow_link() {
  LinkModel link;
  link.latency = 0.030;
  link.bandwidth = 1e6;
  return link;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST(LocalTransport, ALinkDelaysMessagesBetweenDevicesOneAtATime) {
  LocalTransport transport(slow_link());
  const auto start = std::chrono::steady_clock::now();
  // Two 4 KB messages on the same link: the second starts when the first has arrived.
  transport.send(0, 1, {0, 0, 1, 0, Direction::kForward}, {torch::zeros({1024})});
  transport.send(0, 1, {0, 0, 1, 1, Direction::kForward}, {torch::zeros({1024})});
  const double sent = ms_since(start);
  EXPECT_LT(sent, 30) << "the sender does not wait for the link";
  transport.recv(0, 1, {0, 0, 1, 0, Direction::kForward});
  EXPECT_GE(ms_since(start), 34.0);
  transport.recv(0, 1, {0, 0, 1, 1, Direction::kForward});
  EXPECT_GE(ms_since(start), 68.0);
  // Within one device a message is free, whatever the link.
  transport.send(1, 1, {0, 1, 2, 0, Direction::kForward}, {torch::zeros({1024})});
  EXPECT_EQ(transport.recv(1, 1, {0, 1, 2, 0, Direction::kForward}).size(), 1u);
}

TEST(LocalTransport, AbortEndsAWaitForTheLink) {
  LinkModel link;
  link.latency = 60.0;  // a minute: only the abort can end the wait
  LocalTransport transport(link);
  transport.send(0, 1, {}, {torch::ones({1})});
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    transport.abort("stage 1 failed");
  });
  EXPECT_THROW(transport.recv(0, 1, {}), AbortedError);
  aborter.join();
}

}  // namespace
}  // namespace gpipe::testing
