// Bad requests: each gets the right status and a message naming what was wrong, in the OpenAI
// error shape; unknown routes, wrong methods and oversized bodies.
#include <gtest/gtest.h>

#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using nlohmann::json;

TEST(HttpErrors, TableOfBadInputs) {
  TestServer s([](EngineConfig&) {},
               [] {
                 fake::FakeEngineOptions o;
                 o.max_model_len = 64;
                 return o;
               }());
  struct Case {
    const char* path;
    std::string body;
    int status;
    const char* substr;
  } cases[] = {
      {"/v1/completions", "{not json", 400, "not valid JSON"},
      {"/v1/completions", "[1,2]", 400, "must be a JSON object"},
      {"/v1/completions", "", 400, "empty"},
      {"/v1/completions", R"({"max_tokens":3})", 400, "'prompt' is required"},
      {"/v1/completions", R"({"prompt":5})", 400, "'prompt' must be"},
      {"/v1/completions", R"({"prompt":[]})", 400, "'prompt' must be"},
      {"/v1/completions", R"({"prompt":[1,-4]})", 400, "outside the vocabulary"},
      {"/v1/completions", R"({"prompt":"a","suffix":"b"})", 400, "'suffix'"},
      {"/v1/completions", R"({"prompt":"a","temperature":"hot"})", 400, "'temperature' must be a number"},
      {"/v1/completions", R"({"prompt":"a","top_p":0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"a","top_p":1.5})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"a","repetition_penalty":0.5})", 400, "repetition_penalty"},
      {"/v1/completions", R"({"prompt":"a","n":0})", 400, "n"},
      {"/v1/completions", R"({"prompt":"a","stream":"yes"})", 400, "'stream' must be a boolean"},
      {"/v1/completions", R"({"prompt":"a","stop":["x",""]})", 400, "stop"},
      {"/v1/completions", R"({"prompt":"a","logprobs":50})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt":"a","guided_regex":"(a)\\1"})", 400, "backreferences are not supported"},
      {"/v1/completions", R"({"prompt":"a","max_tokens":100})", 400,
       "This model's maximum context length is 64 tokens"},
      {"/v1/chat/completions", R"({"messages":"hi"})", 400, "'messages' must be"},
      {"/v1/chat/completions", R"({"messages":[{"content":"x"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})", 400, "top_logprobs"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1000})", 400,
       "maximum context length"},
      {"/v1/tokenize", R"({"prompt":3})", 400, "'prompt' must be a string"},
      {"/v1/detokenize", R"({"tokens":"abc"})", 400, "'tokens'"},
      {"/v1/detokenize", R"({"tokens":[99999999]})", 400, "outside the vocabulary"},
      {"/api/v1/generate", R"({"max_length":3})", 400, "'prompt'"},
      {"/api/v1/generate", R"({"prompt":"a","max_length":10,"max_context_length":5})", 400, "max_length"},
      {"/api/extra/tokencount", R"({})", 400, "'prompt'"},
  };
  for (const auto& c : cases) {
    auto r = post_json(s, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.path << " " << c.body << " -> " << r.body;
    ASSERT_TRUE(r.json.is_object()) << c.path << " " << c.body << " -> " << r.body;
    ASSERT_TRUE(r.json.contains("error")) << r.body;
    const std::string msg = r.json["error"]["message"].get<std::string>();
    EXPECT_NE(msg.find(c.substr), std::string::npos) << c.path << " " << c.body << " -> " << msg;
    EXPECT_EQ(r.json["error"]["code"], c.status);
    EXPECT_TRUE(r.json["error"].contains("type"));
    EXPECT_TRUE(r.json["error"].contains("param"));
  }
  // Sampler range errors name the parameter in "param" too.
  auto r = post_json(s, "/v1/completions", R"({"prompt":"a","top_p":1.5})");
  EXPECT_EQ(r.json["error"]["param"], "top_p");
  // Nothing bad reached the engine.
  EXPECT_TRUE(s.engine->submitted().empty());
}

TEST(HttpErrors, KoboldErrorsCarryDetailMsg) {
  TestServer s;
  auto r = post_json(s, "/api/v1/generate", R"({"prompt":"a","max_length":10,"max_context_length":5})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.json["detail"]["msg"].get<std::string>().find("max_length"), std::string::npos);
}

TEST(HttpErrors, UnknownRouteWrongMethodAndBodyLimit) {
  TestServer s([](EngineConfig& c) { c.server.max_request_body_mb = 1; });
  auto r = get(s, "/v1/nothing");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.json["error"]["code"], 404);
  r = get(s, "/v1/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.json["error"]["code"], 405);
  std::string big = R"({"prompt":")" + std::string(2 << 20, 'a') + "\"}";
  r = post_json(s, "/v1/completions", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_TRUE(s.engine->submitted().empty());
}

TEST(HttpErrors, NoModelLoadedIs503) {
  TestServer s([](EngineConfig& c) { c.server.admin_key = "adm"; });
  httplib::Headers admin = {{"Authorization", "Bearer adm"}};
  auto c = s.client();
  auto r = to_reply(c.Delete("/v1/model/unload", admin));
  ASSERT_EQ(r.status, 200) << r.body;
  auto g = post_json(s, "/v1/completions", R"({"prompt":"a"})");
  EXPECT_EQ(g.status, 503);
  EXPECT_EQ(get(s, "/health").status, 503);
  EXPECT_EQ(get(s, "/v1/models").json["data"].size(), 0u);
}
