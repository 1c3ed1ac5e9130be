// The OpenAI routes over real HTTP against the fake engine.
#include <gtest/gtest.h>

#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using fake::FakeEngine;
using nlohmann::json;

TEST(OpenAiRoutes, ModelsListsServedNamesWithMaxModelLen) {
  TestServer s([](EngineConfig& c) { c.model.served_model_name = {"alpha", "beta"}; });
  auto r = get(s, "/v1/models");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json["object"], "list");
  ASSERT_EQ(r.json["data"].size(), 2u);
  EXPECT_EQ(r.json["data"][0]["id"], "alpha");
  EXPECT_EQ(r.json["data"][1]["id"], "beta");
  EXPECT_EQ(r.json["data"][0]["max_model_len"], 512);
  EXPECT_EQ(r.json["data"][0]["object"], "model");
}

TEST(OpenAiRoutes, CompletionNonStreaming) {
  TestServer s([](EngineConfig& c) { c.model.served_model_name = {"alpha"}; });
  auto r = post_json(s, "/v1/completions", R"({"model":"whatever","prompt":"Hello world","max_tokens":4,"foo":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "text_completion");
  EXPECT_EQ(r.json["model"], "alpha");  // any model name is answered with the first served name
  ASSERT_EQ(r.json["choices"].size(), 1u);
  EXPECT_EQ(r.json["choices"][0]["text"], FakeEngine::expected_text(0, 4));
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(r.json["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 4);
  EXPECT_EQ(r.json["usage"]["total_tokens"], 6);
  // Defaults reached the engine: max_tokens as asked, no BOS added to the prompt.
  auto sub = s.engine->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt_token_ids.size(), 2u);
}

TEST(OpenAiRoutes, CompletionDefaultMaxTokensIs16AndStopString) {
  TestServer s;
  auto r = post_json(s, "/v1/completions", R"({"prompt":"a"})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json["choices"][0]["text"], FakeEngine::expected_text(0, 16));
  r = post_json(s, "/v1/completions", R"({"prompt":"a","max_tokens":10,"stop":[" t3"]})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json["choices"][0]["text"], FakeEngine::expected_text(0, 3));
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r.json["choices"][0]["stop_reason"], " t3");
}

TEST(OpenAiRoutes, CompletionStreamingEndsWithDoneAndMatchesNonStreaming) {
  TestServer s;
  auto st = post_stream(s, "/v1/completions", R"({"prompt":"Hello","max_tokens":5,"stream":true})");
  ASSERT_EQ(st.status, 200);
  ASSERT_GE(st.events.size(), 2u);
  EXPECT_EQ(st.events.back().data, "[DONE]");
  EXPECT_EQ(completion_texts(st)[0], FakeEngine::expected_text(0, 5));
  auto last = json::parse(st.events[st.events.size() - 2].data);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["object"], "text_completion");
}

TEST(OpenAiRoutes, StreamIncludeUsage) {
  TestServer s;
  auto st = post_stream(s, "/v1/completions",
                        R"({"prompt":"a b c","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_GE(st.events.size(), 2u);
  EXPECT_EQ(st.events.back().data, "[DONE]");
  auto usage = json::parse(st.events[st.events.size() - 2].data);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
}

TEST(OpenAiRoutes, NGreaterThanOneStreamingAndNot) {
  TestServer s;
  auto r = post_json(s, "/v1/completions", R"({"prompt":"x","max_tokens":3,"n":3})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.json["choices"][i]["index"], i);
    EXPECT_EQ(r.json["choices"][i]["text"], FakeEngine::expected_text(i, 3));
  }
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 9);
  auto st = post_stream(s, "/v1/completions", R"({"prompt":"x","max_tokens":3,"n":3,"stream":true})");
  auto texts = completion_texts(st, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(texts[i], FakeEngine::expected_text(i, 3));
  // Each chunk carries exactly one choice.
  for (const auto& e : st.events) {
    if (e.data != "[DONE]") EXPECT_EQ(json::parse(e.data)["choices"].size(), 1u);
  }
}

TEST(OpenAiRoutes, SeveralPromptsGetConsecutiveChoiceIndexes) {
  TestServer s;
  auto r = post_json(s, "/v1/completions", R"({"prompt":["a","b c"],"max_tokens":2,"n":2})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["choices"].size(), 4u);
  EXPECT_EQ(r.json["choices"][2]["text"], FakeEngine::expected_text(0, 2));
  EXPECT_EQ(r.json["choices"][3]["text"], FakeEngine::expected_text(1, 2));
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], 3);
}

TEST(OpenAiRoutes, TokenIdPrompts) {
  TestServer s;
  auto ids = s.engine->tokenizer()->encode("one two", false);
  json body = {{"prompt", ids}, {"max_tokens", 2}, {"echo", true}};
  auto r = post_json(s, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["text"], "one two" + FakeEngine::expected_text(0, 2));
}

TEST(OpenAiRoutes, CompletionLogprobsLegacyFormat) {
  TestServer s;
  auto r = post_json(s, "/v1/completions", R"({"prompt":"a","max_tokens":3,"logprobs":2})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json& lp = r.json["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["tokens"][0], " t0");
  EXPECT_EQ(lp["tokens"][2], " t2");
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), -0.5);
  EXPECT_EQ(lp["text_offset"], json::array({0, 3, 6}));
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);  // top-2
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][0][" t0"].get<double>(), -0.5);
  // Streaming: the chunks carry their part; SillyTavern reads choices[0].logprobs.top_logprobs[0].
  auto st = post_stream(s, "/v1/completions", R"({"prompt":"a","max_tokens":2,"logprobs":1,"stream":true})");
  auto first = json::parse(st.events.at(0).data);
  EXPECT_EQ(first["choices"][0]["logprobs"]["tokens"][0], " t0");
  auto second = json::parse(st.events.at(1).data);
  EXPECT_EQ(second["choices"][0]["logprobs"]["text_offset"][0], 3);
}

TEST(OpenAiRoutes, EchoStreaming) {
  TestServer s;
  auto st = post_stream(s, "/v1/completions", R"({"prompt":"Say","max_tokens":2,"echo":true,"stream":true})");
  EXPECT_EQ(completion_texts(st)[0], "Say" + FakeEngine::expected_text(0, 2));
}

TEST(OpenAiRoutes, EngineErrorMidStreamSendsErrorThenDone) {
  TestServer s;
  auto st = post_stream(s, "/v1/completions", R"({"prompt":"FAIL_NOW","max_tokens":8,"stream":true})");
  ASSERT_GE(st.events.size(), 2u);
  EXPECT_EQ(st.events.back().data, "[DONE]");
  auto err = json::parse(st.events[st.events.size() - 2].data);
  ASSERT_TRUE(err.contains("error"));
  EXPECT_NE(err["error"]["message"].get<std::string>().find("simulated engine failure"), std::string::npos);
  auto r = post_json(s, "/v1/completions", R"({"prompt":"FAIL_NOW","max_tokens":8})");
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find("simulated"), std::string::npos);
}

TEST(OpenAiRoutes, ChatNonStreaming) {
  TestServer s([](EngineConfig& c) { c.server.response_role = "bot"; });
  auto r = post_json(s, "/v1/chat/completions",
                     R"({"model":"x","messages":[{"role":"user","content":"Hi there"}],"max_tokens":3})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "chat.completion");
  EXPECT_EQ(r.json["choices"][0]["message"]["role"], "bot");
  EXPECT_EQ(r.json["choices"][0]["message"]["content"], FakeEngine::expected_text(0, 3));
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "length");
  // The prompt went through the chat template (with the generation prompt).
  auto sub = s.engine->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_NE(sub[0].prompt.find("Hi there"), std::string::npos);
  EXPECT_GT(sub[0].prompt.size(), std::string("Hi there").size());
}

TEST(OpenAiRoutes, ChatWithoutMaxTokensUsesTheRestOfTheContext) {
  TestServer s([](EngineConfig&) {},
               [] {
                 fake::FakeEngineOptions o;
                 o.max_model_len = 40;
                 return o;
               }());
  auto r = post_json(s, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["prompt_tokens"].get<int>() + r.json["usage"]["completion_tokens"].get<int>(), 40);
}

TEST(OpenAiRoutes, ChatStreamingRoleChunkThenContentThenDone) {
  TestServer s;
  auto st = post_stream(s, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true,"n":2,
                            "stream_options":{"include_usage":true}})");
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(st.events.back().data, "[DONE]");
  auto first = json::parse(st.events.at(0).data);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  auto texts = completion_texts(st, 2);
  EXPECT_EQ(texts[0], FakeEngine::expected_text(0, 3));
  EXPECT_EQ(texts[1], FakeEngine::expected_text(1, 3));
  auto usage = json::parse(st.events[st.events.size() - 2].data);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  int finals = 0;
  for (const auto& e : st.events) {
    if (e.data == "[DONE]") continue;
    auto j = json::parse(e.data);
    if (!j["choices"].empty() && j["choices"][0]["finish_reason"] == "length") ++finals;
  }
  EXPECT_EQ(finals, 2);
}

TEST(OpenAiRoutes, ChatLogprobs) {
  TestServer s;
  auto r =
      post_json(s, "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json& c = r.json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]["token"], " t0");
  EXPECT_DOUBLE_EQ(c[0]["logprob"].get<double>(), -0.5);
  EXPECT_EQ(c[0]["bytes"], json::array({32, 116, 48}));
  EXPECT_EQ(c[0]["top_logprobs"].size(), 2u);
}

TEST(OpenAiRoutes, TokenizeAndDetokenize) {
  TestServer s;
  auto r = post_json(s, "/v1/tokenize", R"({"model":"m","prompt":"Hello big world"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["count"], 4);  // BOS + 3 words (add_special_tokens defaults to true)
  EXPECT_EQ(r.json["tokens"].size(), 4u);
  EXPECT_EQ(r.json["tokens"][0], 1);
  EXPECT_EQ(r.json["max_model_len"], 512);
  EXPECT_EQ(r.json["value"], 4);
  json d = {{"tokens", r.json["tokens"]}};
  auto back = post_json(s, "/v1/detokenize", d.dump());
  ASSERT_EQ(back.status, 200);
  EXPECT_EQ(back.json["prompt"], "<s>Hello big world");  // special tokens kept, as Hugging Face decode does
  auto no_bos = post_json(s, "/v1/tokenize", R"({"prompt":"Hello","add_special_tokens":false})");
  EXPECT_EQ(no_bos.json["count"], 1);
  auto chat = post_json(s, "/v1/tokenize", R"({"messages":[{"role":"user","content":"Hello"}]})");
  ASSERT_EQ(chat.status, 200);
  // The messages went through the chat template: more text than the message itself.
  std::string rendered = s.engine->tokenizer()->decode(chat.json["tokens"].get<std::vector<int32_t>>());
  EXPECT_NE(rendered.find("Hello"), std::string::npos);
  EXPECT_GT(rendered.size(), std::string("Hello").size());
  auto enc = post_json(s, "/v1/token/encode", R"({"prompt":"a b"})");
  EXPECT_EQ(enc.json["value"], 3);
}

TEST(OpenAiRoutes, HealthVersionServiceInfoMetrics) {
  TestServer s;
  EXPECT_EQ(get(s, "/health").status, 200);
  auto v = get(s, "/version");
  EXPECT_EQ(v.status, 200);
  EXPECT_TRUE(v.json["version"].is_string());
  auto si = get(s, "/.well-known/serviceinfo");
  EXPECT_EQ(si.json["api"]["openai"]["rel_url"], "/v1");
  EXPECT_EQ(si.json["api"]["koboldai"]["rel_url"], "/api");
  ASSERT_EQ(post_json(s, "/v1/completions", R"({"prompt":"a","max_tokens":3})").status, 200);
  auto m = get(s, "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("aphrodite:num_requests_running{model_name=\"fake-model\"}"), std::string::npos);
  EXPECT_NE(m.body.find("aphrodite:gpu_cache_usage_perc{model_name=\"fake-model\"} 0.25"), std::string::npos);
  EXPECT_NE(m.body.find("aphrodite:generation_tokens_total{model_name=\"fake-model\"} 3"), std::string::npos);
  EXPECT_NE(m.body.find("aphrodite:time_to_first_token_seconds_count{model_name=\"fake-model\"} 1"), std::string::npos);
  EXPECT_NE(m.body.find("aphrodite:time_per_output_token_seconds_count{model_name=\"fake-model\"} 2"),
            std::string::npos);
  EXPECT_NE(m.body.find("aphrodite:e2e_request_latency_seconds_count{model_name=\"fake-model\"} 1"), std::string::npos);
}

TEST(OpenAiRoutes, ChatTemplateSelection) {
  // No template in the tokenizer: ChatML.
  TestServer s;
  ASSERT_EQ(
      post_json(s, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1})").status,
      200);
  EXPECT_EQ(s.engine->submitted().back().prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // The request's chat_template wins; text parts are joined.
  auto r = post_json(s, "/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":"text","text":"A"},
      {"type":"text","text":"B"}]}],"max_tokens":1,
      "chat_template":"{% for m in messages %}[{{ m.role }}]{{ m.content }}|{% endfor %}{% if add_generation_prompt %}>{% endif %}"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.engine->submitted().back().prompt, "[user]AB|>");
  // A template that raises is a 400 with its message.
  r = post_json(s, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],
      "chat_template":"{{ raise_exception('roles must alternate') }}"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("roles must alternate"), std::string::npos) << r.body;
  // --chat-template (the text itself) applies to every request.
  TestServer t(
      [](EngineConfig& c) { c.server.chat_template = "{% for m in messages %}<{{ m.content }}>{% endfor %}"; });
  ASSERT_EQ(
      post_json(t, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1})").status,
      200);
  EXPECT_EQ(t.engine->submitted().back().prompt, "<Hi>");
}
