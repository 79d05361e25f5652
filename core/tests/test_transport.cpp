#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

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

// ---- the mailbox both transports share (mailbox.h) -------------------------------------------

TEST(Mailbox, AnAbortEndsEveryWaitEvenForAMessageThatIsThere) {
  Mailbox mailbox;
  const MessageKey key{1, 0, 1, 0, Direction::kForward};
  mailbox.put(key, {torch::ones({1})});
  mailbox.abort("device 1 failed");
  mailbox.abort("a later failure");
  expect_error<AbortedError>([&] { mailbox.take(key); }, {"device 1 failed"});
  expect_error<AbortedError>([&] { mailbox.take(MessageKey{}); }, {"device 1 failed"});
  mailbox.reset();  // a new step: the message and the abort are gone
  mailbox.put(key, {torch::zeros({1})});
  EXPECT_EQ(mailbox.take(key)[0].item<float>(), 0);
}

TEST(Mailbox, AMessageIsTakenNoEarlierThanItsArrival) {
  Mailbox mailbox;
  const auto start = Mailbox::Clock::now();
  mailbox.put(MessageKey{}, {torch::ones({1})}, start + std::chrono::milliseconds(30));
  EXPECT_EQ(mailbox.take(MessageKey{}).size(), 1u);
  EXPECT_GE(Mailbox::Clock::now() - start, std::chrono::milliseconds(30));
}

TEST(Mailbox, AFailingCheckEndsTheWaitAndNotifyRunsItAtOnce) {
  Mailbox mailbox;
  std::atomic<bool> failed{false};
  std::atomic<int> checks{0};
  const auto check = [&] {
    ++checks;
    if (failed) throw Error("the peer is gone");
  };
  std::thread failer([&] {
    while (checks == 0)  // the first check, before waiting, has passed
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    failed = true;
    mailbox.notify();
  });
  const auto start = Mailbox::Clock::now();
  // A poll of a minute: only notify() can have run the failing check this soon.
  EXPECT_THROW(mailbox.take(MessageKey{}, check, std::chrono::minutes(1)), Error);
  EXPECT_LT(Mailbox::Clock::now() - start, std::chrono::seconds(30));
  EXPECT_GE(checks.load(), 2);  // once before waiting, once when notified
  failer.join();
  // A message that arrives while waiting is taken without the check failing.
  failed = false;
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    mailbox.put(MessageKey{}, {torch::ones({2})});
  });
  EXPECT_EQ(mailbox.take(MessageKey{}, check, std::chrono::minutes(1))[0].numel(), 2);
  sender.join();
}

TEST(Mailbox, KeysDifferInEveryField) {
  Mailbox mailbox;
  const MessageKey base{1, 2, 3, 4, Direction::kForward};
  std::vector<MessageKey> keys(6, base);
  keys[1].step = 9;
  keys[2].from_stage = 9;
  keys[3].to_stage = 9;
  keys[4].microbatch = 9;
  keys[5].direction = Direction::kBackward;
  for (size_t i = 0; i < keys.size(); ++i)
    mailbox.put(keys[i], {torch::full({1}, static_cast<float>(i))});
  for (size_t i = keys.size(); i-- > 0;)
    EXPECT_EQ(mailbox.take(keys[i])[0].item<float>(), static_cast<float>(i));
}

}  // namespace
}  // namespace gpipe::testing
