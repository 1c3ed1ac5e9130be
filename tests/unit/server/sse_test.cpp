#include "app/server/sse.h"

#include <gtest/gtest.h>

using namespace cypris::server;

TEST(Sse, DataFrameAndDone) {
  EXPECT_EQ(sse_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

TEST(Sse, MultiLinePayloadBecomesSeveralDataLines) {
  EXPECT_EQ(sse_data("a\nb"), "data: a\ndata: b\n\n");
}

TEST(Sse, KoboldEventFrame) {
  EXPECT_EQ(sse_event("message", "{\"token\":\"x\"}"), "event: message\ndata: {\"token\":\"x\"}\n\n");
}

TEST(SseParser, ReassemblesEventsSplitAcrossChunks) {
  SseParser p;
  std::string stream =
      sse_event("message", "{\"token\":\"hi\"}") + sse_data("a\nb") + ": keepalive\n\n" + std::string(kSseDone);
  std::vector<SseEvent> all;
  for (size_t i = 0; i < stream.size(); i += 3) {  // 3-byte pieces split every line somewhere
    for (auto& e : p.feed(std::string_view(stream).substr(i, 3))) all.push_back(e);
  }
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].event, "message");
  EXPECT_EQ(all[0].data, "{\"token\":\"hi\"}");
  EXPECT_EQ(all[1].event, "");
  EXPECT_EQ(all[1].data, "a\nb");
  EXPECT_EQ(all[2].data, "[DONE]");
}

TEST(SseParser, AcceptsCrLf) {
  SseParser p;
  auto ev = p.feed("data: x\r\n\r\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "x");
}
