// Streaming under concurrency and client disconnects.
#include <gtest/gtest.h>

#include <thread>

#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using fake::FakeEngine;
using nlohmann::json;

TEST(Streaming, ThirtyTwoConcurrentClientsMatchTheirSoloRuns) {
  TestServer s;
  auto body = [](int i) {
    return json{
        {"prompt", "client " + std::to_string(i)}, {"max_tokens", 8 + i % 5}, {"n", 1 + i % 2}, {"stream", true}}
        .dump();
  };
  auto chat_body = [](int i) {
    return json{{"messages", {{{"role", "user"}, {"content", "hi " + std::to_string(i)}}}},
                {"max_tokens", 6 + i % 3},
                {"stream", true}}
        .dump();
  };
  auto path = [](int i) { return i % 4 == 3 ? "/v1/chat/completions" : "/v1/completions"; };
  auto run = [&](int i) {
    auto r = post_stream(s, path(i), i % 4 == 3 ? chat_body(i) : body(i));
    EXPECT_EQ(r.status, 200) << r.error;
    EXPECT_FALSE(r.events.empty());
    if (!r.events.empty()) EXPECT_EQ(r.events.back().data, "[DONE]");
    return completion_texts(r, 2);
  };
  constexpr int kClients = 32;
  std::vector<std::vector<std::string>> solo(kClients), together(kClients);
  for (int i = 0; i < kClients; ++i) solo[i] = run(i);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) threads.emplace_back([&, i] { together[i] = run(i); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(together[i], solo[i]) << "client " << i;
    EXPECT_EQ(solo[i][0], FakeEngine::expected_text(0, i % 4 == 3 ? 6 + i % 3 : 8 + i % 5)) << "client " << i;
  }
}

TEST(Streaming, DisconnectMidStreamAbortsTheRequest) {
  fake::FakeEngineOptions o;
  o.token_delay = std::chrono::milliseconds(1);
  TestServer s([](EngineConfig&) {}, o);
  // Read two events, then hang up; the request would otherwise run 450 more tokens.
  auto r = post_stream(s, "/v1/completions", R"({"prompt":"x","max_tokens":450,"stream":true})", 2);
  EXPECT_GE(r.events.size(), 2u);
  EXPECT_TRUE(s.engine->wait_for_abort("cmpl-", std::chrono::seconds(10)));
  // The chat and Kobold streams do the same.
  r = post_stream(s, "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"x"}],"max_tokens":450,"stream":true})", 2);
  EXPECT_TRUE(s.engine->wait_for_abort("chatcmpl-", std::chrono::seconds(10)));
  r = post_stream(s, "/api/extra/generate/stream", R"({"prompt":"x","max_length":450,"max_context_length":500})", 2);
  EXPECT_TRUE(s.engine->wait_for_abort("kai-", std::chrono::seconds(10)));
  EXPECT_EQ(s.engine->stats().num_running, 0);
}

TEST(Streaming, StopCancelsRunningStreams) {
  fake::FakeEngineOptions o;
  o.token_delay = std::chrono::milliseconds(2);
  auto s = std::make_unique<TestServer>([](EngineConfig&) {}, o);
  StreamReply r;
  std::thread t([&] { r = post_stream(*s, "/v1/completions", R"({"prompt":"x","max_tokens":450,"stream":true})"); });
  while (s->engine->stats().num_running == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  s->server->stop();  // returns once the handler threads are gone
  t.join();
  EXPECT_FALSE(s->engine->aborted().empty());
}

TEST(Streaming, DisconnectBeforeTheFirstTokenAbortsTheRequest) {
  // A long prefill: no token for 30 s. A client that gives up earlier must not leave the request
  // running until then, streaming or not.
  fake::FakeEngineOptions o;
  o.first_token_delay = std::chrono::seconds(30);
  TestServer s([](EngineConfig&) {}, o);
  const auto start = std::chrono::steady_clock::now();
  {
    httplib::Client c("127.0.0.1", s.port);
    c.set_read_timeout(0, 200000);  // gives up after 0.2 s and closes the connection
    auto r = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":5,"stream":true})", "application/json");
    (void)r;
  }
  EXPECT_TRUE(s.engine->wait_for_abort("cmpl-", std::chrono::seconds(20)));
  {
    httplib::Client c("127.0.0.1", s.port);
    c.set_read_timeout(0, 200000);
    auto r = c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5})",
                    "application/json");
    (void)r;
  }
  EXPECT_TRUE(s.engine->wait_for_abort("chatcmpl-", std::chrono::seconds(20)));
  {
    httplib::Client c("127.0.0.1", s.port);
    c.set_read_timeout(0, 200000);
    auto r = c.Post("/api/v1/generate", R"({"prompt":"x","max_length":5})", "application/json");
    (void)r;
  }
  EXPECT_TRUE(s.engine->wait_for_abort("kai-", std::chrono::seconds(20)));
  // All three were aborted before any token could have been produced.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}
