// The KoboldAI routes over HTTP against the fake engine.
#include <gtest/gtest.h>

#include <thread>

#include "engine/request/sampling_params.h"
#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using fake::FakeEngine;
using nlohmann::json;

TEST(KoboldRoutes, GenerateUnderV1AndLatest) {
  TestServer s;
  for (const char* path : {"/api/v1/generate", "/api/latest/generate"}) {
    auto r = post_json(s, path, R"({"prompt":"Once upon","max_length":4,"max_context_length":100,"rep_pen":1.1})");
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_EQ(r.json["results"].size(), 1u);
    EXPECT_EQ(r.json["results"][0]["text"], FakeEngine::expected_text(0, 4));
  }
  auto sub = s.engine->submitted();
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub[0].prompt_token_ids.front(), 1);  // BOS, as KoboldCpp adds it
  EXPECT_FLOAT_EQ(sub[0].params->repetition_penalty, 1.1f);
  EXPECT_EQ(sub[0].params->max_tokens, 4);
}

TEST(KoboldRoutes, PromptIsLeftTruncatedToTheContext) {
  TestServer s;
  // BOS + 10 words; context 8, max_length 3: the last 5 tokens are kept.
  auto r = post_json(s, "/api/v1/generate",
                     R"({"prompt":"w0 w1 w2 w3 w4 w5 w6 w7 w8 w9","max_length":3,"max_context_length":8})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto sub = s.engine->submitted();
  ASSERT_EQ(sub.size(), 1u);
  const auto* tok = s.engine->tokenizer();
  EXPECT_EQ(tok->decode(sub[0].prompt_token_ids), " w5 w6 w7 w8 w9");
}

TEST(KoboldRoutes, StreamSendsMessageEventsAndCloses) {
  TestServer s;
  auto st = post_stream(s, "/api/extra/generate/stream", R"({"prompt":"x","max_length":5})");
  ASSERT_EQ(st.status, 200);
  std::string text;
  for (const auto& e : st.events) {
    EXPECT_EQ(e.event, "message");
    text += json::parse(e.data)["token"].get<std::string>();
  }
  EXPECT_EQ(text, FakeEngine::expected_text(0, 5));
  EXPECT_EQ(st.raw.find("[DONE]"), std::string::npos);  // Kobold streams just end
}

TEST(KoboldRoutes, CheckAndAbortByGenkey) {
  fake::FakeEngineOptions o;
  o.token_delay = std::chrono::milliseconds(2);
  TestServer s([](EngineConfig&) {}, o);
  Reply gen;
  std::thread t([&] {
    gen = post_json(s, "/api/v1/generate",
                    R"({"prompt":"x","max_length":400,"max_context_length":500,"genkey":"KCPP42"})");
  });
  // Wait until it is generating, then read the partial text and abort it.
  std::string partial;
  for (int i = 0; i < 500 && partial.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    partial = post_json(s, "/api/extra/generate/check", R"({"genkey":"KCPP42"})").json["results"][0]["text"];
  }
  EXPECT_EQ(partial.rfind(" t0", 0), 0u) << partial;
  auto ab = post_json(s, "/api/extra/abort", R"({"genkey":"KCPP42"})");
  EXPECT_EQ(ab.status, 200);
  EXPECT_EQ(ab.json["success"], true);
  t.join();
  ASSERT_EQ(gen.status, 200) << gen.body;
  EXPECT_LT(gen.json["results"][0]["text"].get<std::string>().size(), FakeEngine::expected_text(0, 400).size());
  EXPECT_TRUE(s.engine->wait_for_abort("KCPP42", std::chrono::seconds(5)));
  // Finished generations are forgotten.
  EXPECT_EQ(post_json(s, "/api/extra/generate/check", R"({"genkey":"KCPP42"})").json["results"][0]["text"], "");
}

TEST(KoboldRoutes, AbortWithoutGenkeyStopsThisClientsGeneration) {
  fake::FakeEngineOptions o;
  o.token_delay = std::chrono::milliseconds(2);
  TestServer s([](EngineConfig&) {}, o);
  StreamReply st;
  std::thread t([&] {
    st = post_stream(s, "/api/extra/generate/stream", R"({"prompt":"x","max_length":400,
                                                                          "max_context_length":500})");
  });
  // SillyTavern's abort: an empty body from the same client address.
  bool aborted = false;
  for (int i = 0; i < 500 && !aborted; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto c = s.client();
    auto r = to_reply(c.Post("/api/extra/abort", "", "application/json"));
    ASSERT_EQ(r.status, 200);
    aborted = r.json["aborted"].get<int>() > 0;
  }
  t.join();
  EXPECT_TRUE(aborted);
  EXPECT_FALSE(s.engine->aborted().empty());
  EXPECT_LT(st.events.size(), 400u);
}

TEST(KoboldRoutes, TokencountAndInfoRoutes) {
  TestServer s([](EngineConfig& c) {
    c.model.served_model_name = {"my-model"};
    c.server.max_length = 123;
  });
  auto r = post_json(s, "/api/extra/tokencount", R"({"prompt":"a b c"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["value"], 4);  // BOS + 3
  EXPECT_EQ(r.json["ids"].size(), 4u);
  EXPECT_EQ(get(s, "/api/v1/model").json["result"], "cypris/my-model");
  EXPECT_EQ(get(s, "/api/latest/model").json["result"], "cypris/my-model");
  EXPECT_EQ(get(s, "/api/v1/info/version").json["result"], "1.2.4");
  auto kcpp = get(s, "/api/extra/version");
  EXPECT_EQ(kcpp.json["result"], "KoboldCpp");
  EXPECT_EQ(kcpp.json["version"], "1.63");
  EXPECT_EQ(get(s, "/api/v1/config/max_length").json["value"], 123);
  EXPECT_EQ(get(s, "/api/v1/config/max_context_length").json["value"], 512);
  EXPECT_EQ(get(s, "/api/extra/true_max_context_length").json["value"], 512);
  EXPECT_EQ(get(s, "/api/v1/config/soft_prompts_list").json["values"].size(), 0u);
}

TEST(KoboldRoutes, OffWithoutLaunchKoboldApi) {
  TestServer s([](EngineConfig& c) { c.server.launch_kobold_api = false; });
  EXPECT_EQ(get(s, "/api/v1/model").status, 404);
  EXPECT_EQ(get(s, "/.well-known/serviceinfo").json["api"].contains("koboldai"), false);
}
