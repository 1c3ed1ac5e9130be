#include "engine/request/outputs.h"

#include <gtest/gtest.h>

#include <thread>

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
