#include "engine/request/outputs.h"

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cypris {
namespace {

RequestOutput delta(const std::string& text, bool finished = false) {
  RequestOutput o;
  o.request_id = "r";
  o.outputs.push_back(CompletionDelta{});
  o.outputs[0].text = text;
  o.finished = finished;
  return o;
}

TEST(RequestStream, DeliversInOrderAcrossThreadsAndEndsAfterTheLastOutput) {
  RequestStream s("r");
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) s.push(delta(std::to_string(i), i == 99));
    s.push(delta("after the end"));  // ignored: nothing follows the last output
  });
  std::string all;
  while (auto o = s.next()) all += o->outputs[0].text + ",";
  producer.join();
  EXPECT_TRUE(s.done());
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += std::to_string(i) + ",";
  EXPECT_EQ(all, expected);
}

TEST(RequestStream, TimeoutReturnsWithoutEnding) {
  RequestStream s("r");
  EXPECT_FALSE(s.next(std::chrono::milliseconds(1)).has_value());
  EXPECT_FALSE(s.done());
}

TEST(RequestStream, CancelCallsBackOnceAndNotAfterTheEnd) {
  int aborted = 0;
  RequestStream s("r", [&](const std::string& id) {
    EXPECT_EQ(id, "r");
    ++aborted;
  });
  s.cancel();
  s.cancel();
  EXPECT_EQ(aborted, 1);
  EXPECT_TRUE(s.cancelled());
  RequestStream finished("f", [&](const std::string&) { ++aborted; });
  finished.push(delta("x", true));
  finished.cancel();
  EXPECT_EQ(aborted, 1);
}

}  // namespace
}  // namespace cypris

namespace cypris {
namespace {

struct Recorder final : StreamListener {
  std::mutex mu;
  std::vector<size_t> heard;
  void notify(size_t index) override {
    std::lock_guard<std::mutex> lock(mu);
    heard.push_back(index);
  }
};

// A consumer of many streams (the server's StreamSet) is told once per output which stream has it,
// including the outputs queued before it started listening, and nothing after the last output.
TEST(RequestStream, ListenerHearsEveryOutputOnceWithItsIndex) {
  RequestStream s("r");
  RequestOutput a;
  a.request_id = "r";
  s.push(a);
  s.push(a);
  auto rec = std::make_shared<Recorder>();
  s.set_listener(rec, 7);
  EXPECT_EQ(rec->heard, (std::vector<size_t>{7, 7}));
  RequestOutput last = a;
  last.finished = true;
  s.push(last);
  s.push(a);  // after the last output: dropped, not heard
  EXPECT_EQ(rec->heard, (std::vector<size_t>{7, 7, 7}));
  int taken = 0;
  while (s.next(std::chrono::milliseconds(0))) ++taken;
  EXPECT_EQ(taken, 3);
  EXPECT_TRUE(s.done());
}

}  // namespace
}  // namespace cypris
