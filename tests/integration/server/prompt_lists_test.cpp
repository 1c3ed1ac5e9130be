// Requests with a list of prompts and other per-request resources (issue #26 item 2, item 4's
// banned_strings, item 5's banned-string give-up): the list and its tokens are bounded with named
// 400s, the prompts reach the engine in one hand-over, a client that leaves cancels every prompt,
// and banned_strings are bounded and their give-up is the client's 400.
#include <gtest/gtest.h>

#include <thread>

#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using nlohmann::json;

namespace {

json prompt_list(size_t count, const std::string& text = "p") {
  json a = json::array();
  for (size_t i = 0; i < count; ++i) a.push_back(text + std::to_string(i));
  return a;
}

// Waits until every one of `count` prompts of the request with id prefix `id` ("cmpl-...-<i>") was
// aborted; returns how many were.
size_t wait_for_aborts(const fake::FakeEngine& e, size_t count, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t n = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    n = e.aborted().size();
    if (n >= count) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return n;
}

}  // namespace

TEST(PromptLists, MorePromptsThanTheLimitIsANamed400BeforeAnyIsSubmitted) {
  TestServer s([](EngineConfig& c) { c.server.max_prompts_per_request = 8; });
  Reply r = post_json(s, "/v1/completions", json{{"prompt", prompt_list(9)}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["param"], "prompt") << r.body;
  EXPECT_NE(r.body.find("--max-prompts-per-request"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("at most 8"), std::string::npos) << r.body;
  // Lists of token-id lists count the same way.
  json ids = json::array();
  for (int i = 0; i < 9; ++i) ids.push_back({5, 6});
  r = post_json(s, "/v1/completions", json{{"prompt", ids}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(s.engine->num_submitted(), 0u);
  // At the limit it is served.
  r = post_json(s, "/v1/completions", json{{"prompt", prompt_list(8)}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"].size(), 8u);
}

TEST(PromptLists, TheDefaultLimitRefusesAHugeListCheaply) {
  TestServer s;
  // 100k one-character prompts (a ~600 KB body; the probe's 8 MB body held 1M of them).
  Reply r = post_json(s, "/v1/completions", json{{"prompt", prompt_list(100000, "")}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("100000 prompts"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("at most 1024"), std::string::npos) << r.body;
  EXPECT_EQ(s.engine->num_submitted(), 0u);
}

TEST(PromptLists, MoreTokensInAllThanTheLimitIsANamed400) {
  TestServer s([](EngineConfig& c) { c.server.max_request_tokens = 20; });
  // The fake tokenizer makes one token per word: 5 prompts of 5 words are 25 tokens.
  json five = json::array();
  for (int i = 0; i < 5; ++i) five.push_back("a b c d e");
  Reply r = post_json(s, "/v1/completions", json{{"prompt", five}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["param"], "prompt") << r.body;
  EXPECT_NE(r.body.find("25 tokens"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("--max-request-tokens"), std::string::npos) << r.body;
  // Token ids count before anything is tokenized; text counts by its bytes first (16 per token).
  json ids = json::array();
  for (int i = 0; i < 3; ++i) ids.push_back(json::array({5, 6, 7, 8, 9, 10, 11}));
  r = post_json(s, "/v1/completions", json{{"prompt", ids}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("21 token ids"), std::string::npos) << r.body;
  r = post_json(
      s, "/v1/completions",
      json{{"prompt", json::array({std::string(200, 'x'), std::string(200, 'y')})}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("400 bytes of text"), std::string::npos) << r.body;
  EXPECT_EQ(s.engine->num_submitted(), 0u);
  // Within the limit it is served.
  five.erase(4);
  r = post_json(s, "/v1/completions", json{{"prompt", five}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
}

// issue #26 item 2: each prompt waited for its own hand-over to the engine (one engine step each),
// so a list cost time with the square of its length.
TEST(PromptLists, AListReachesTheEngineInOneHandOverAndEveryPromptIsAnswered) {
  TestServer s;
  Reply r = post_json(s, "/v1/completions", json{{"prompt", prompt_list(1000)}, {"max_tokens", 2}}.dump());
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
  EXPECT_EQ(s.engine->submit_all_calls(), 1);
  EXPECT_EQ(s.engine->num_submitted(), 1000u);
  ASSERT_EQ(r.json["choices"].size(), 1000u);
  for (const auto& c : r.json["choices"]) EXPECT_EQ(c["text"], fake::FakeEngine::expected_text(0, 2));
}

// issue #26 item 2: after the client left, the prompts of its list went on running.
TEST(PromptLists, AStreamingClientThatLeavesCancelsEveryPrompt) {
  fake::FakeEngineOptions o;
  o.token_delay = std::chrono::milliseconds(2);
  TestServer s([](EngineConfig&) {}, o);
  constexpr size_t kPrompts = 40;
  auto r =
      post_stream(s, "/v1/completions",
                  json{{"prompt", prompt_list(kPrompts)}, {"max_tokens", 400}, {"n", 2}, {"stream", true}}.dump(), 3);
  EXPECT_GE(r.events.size(), 3u);
  EXPECT_EQ(wait_for_aborts(*s.engine, kPrompts, std::chrono::seconds(10)), kPrompts);
  EXPECT_EQ(s.engine->stats().num_running, 0);
}

TEST(PromptLists, ANonStreamingClientThatLeavesCancelsEveryPrompt) {
  fake::FakeEngineOptions o;
  o.token_delay = std::chrono::milliseconds(2);
  TestServer s([](EngineConfig&) {}, o);
  constexpr size_t kPrompts = 40;
  {
    auto c = s.client();
    c.set_read_timeout(0, 200000);  // give up after 200 ms: the connection closes
    auto res = c.Post("/v1/completions", json{{"prompt", prompt_list(kPrompts)}, {"max_tokens", 400}}.dump(),
                      "application/json");
    EXPECT_FALSE(res);
  }
  EXPECT_EQ(wait_for_aborts(*s.engine, kPrompts, std::chrono::seconds(10)), kPrompts);
  EXPECT_EQ(s.engine->stats().num_running, 0);
}

// issue #26 item 4: 100k banned strings of 200 characters cost 4.5 s and 1.45 GB per request.
TEST(BannedStringLimits, TooManyPhrasesOrBytesAreNamed400s) {
  TestServer s;
  json many = json::array();
  for (int i = 0; i < 3000; ++i) many.push_back("w" + std::to_string(i));
  Reply r = post_json(s, "/v1/completions", json{{"prompt", "a"}, {"banned_strings", many}}.dump());
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(r.json["error"]["param"], "banned_strings") << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("3000 phrases"), std::string::npos) << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("at most 2048"), std::string::npos) << r.body.substr(0, 300);
  json long_ones = json::array();
  for (int i = 0; i < 400; ++i) long_ones.push_back(std::string(200, char('a' + i % 26)) + std::to_string(i));
  r = post_json(s, "/v1/completions", json{{"prompt", "a"}, {"banned_strings", long_ones}}.dump());
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(r.json["error"]["param"], "banned_strings") << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("at most 65536 bytes"), std::string::npos) << r.body.substr(0, 300);
  // The Kobold route takes the same field and the same limit.
  r = post_json(s, "/api/v1/generate", json{{"prompt", "a"}, {"max_length", 2}, {"banned_strings", many}}.dump());
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(s.engine->num_submitted(), 0u);
  // Within the limits the request runs.
  many.erase(many.begin() + 2048, many.end());
  r = post_json(s, "/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}, {"banned_strings", many}}.dump());
  EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
}

// issue #26 item 5: banned strings the model cannot get around answered 500.
TEST(BannedStringLimits, AGiveUpIsTheClientsDoingA400) {
  TestServer s;
  Reply r = post_json(s, "/v1/completions", json{{"prompt", "CLIENT_FAIL"}, {"max_tokens", 5}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["param"], "banned_strings") << r.body;
  r = post_json(s, "/v1/chat/completions",
                json{{"messages", {{{"role", "user"}, {"content", "CLIENT_FAIL"}}}}, {"max_tokens", 5}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  // Streaming: the error event carries 400.
  auto st =
      post_stream(s, "/v1/completions", json{{"prompt", "CLIENT_FAIL"}, {"max_tokens", 5}, {"stream", true}}.dump());
  bool saw = false;
  for (const auto& e : st.events) {
    auto j = json::parse(e.data, nullptr, false);
    if (j.is_object() && j.contains("error")) {
      saw = true;
      EXPECT_EQ(j["error"]["code"], 400) << e.data;
    }
  }
  EXPECT_TRUE(saw) << st.raw;
  // An engine fault is still the server's 500.
  r = post_json(s, "/v1/completions", json{{"prompt", "FAIL_NOW"}, {"max_tokens", 5}}.dump());
  EXPECT_EQ(r.status, 500) << r.body;
}
