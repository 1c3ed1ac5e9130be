// Request fields Aphrodite and vLLM clients rely on, over HTTP against the fake engine, on every
// generation route (OpenAI completions and chat, Kobold generate): every sampler field of
// ../shared/reference/sampler-notes.md reaches the engine (none silently dropped), dynatemp_range,
// and vLLM's request `priority`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "engine/request/sampling_params.h"
#include "tests/integration/server/server_fixture.h"

using namespace cypris;
using namespace cypris::test;
using nlohmann::json;

namespace {

struct Route {
  const char* path;
  json body;  // the smallest valid request; fields are added to it
};

std::vector<Route> routes() {
  return {
      {"/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 3}}},
      {"/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 3}}},
      {"/api/v1/generate", {{"prompt", "Once upon"}, {"max_length", 3}}}};
}

// The request fields the sampler notes name: every backticked identifier, with its default when the
// notes give one as name=value. Formula variables (c, cum, p, logits, DRY's max_ngram) and the 0.6
// code's prompt_tokens are not request fields.
std::set<std::string> sampler_note_fields() {
  std::ifstream in(std::string(CYPRIS_TESTDATA_DIR) + "/../reference/sampler-notes.md");
  EXPECT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::set<std::string> out;
  const std::regex re(R"(`([a-z][a-z0-9_]*)(=[^`]*)?`)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1].str();
    if (name == "c" || name == "cum" || name == "p" || name == "logits" || name == "max_ngram" ||
        name == "prompt_tokens") {
      continue;
    }
    out.insert(name);
  }
  return out;
}

// A valid value of the parameter that is not its default.
json non_default_value(const SamplingParamInfo& info) {
  switch (info.kind) {
    case ParamKind::Float:
      return info.default_value + 0.25;
    case ParamKind::Int:
      return static_cast<int64_t>(info.default_value) + 2;  // mirostat_mode takes 0 or 2
    case ParamKind::Bool:
      return info.default_value == 0;
    case ParamKind::IntList:
      return json::array({1, 2});
    case ParamKind::StringList:
      return json::array({"zzz"});
    case ParamKind::SamplerOrder: {
      json order = json::array();
      for (int id = kNumSamplerIds - 1; id >= 0; --id) order.push_back(std::string(sampler_id_name(SamplerId(id))));
      return order;
    }
    default:
      return nullptr;
  }
}

// What the engine received, field by field, for comparison.
json describe(const SamplingParams& p) {
  json d = json::object();
  for (const auto& info : sampling_param_table()) {
    if (info.get) d[std::string(info.name)] = info.get(p) ? json(*info.get(p)) : json(nullptr);
  }
  d["dry_sequence_breakers"] = p.dry_sequence_breakers;
  d["dry_sequence_breaker_ids"] = p.dry_sequence_breaker_ids;
  d["custom_token_bans"] = p.custom_token_bans;
  d["allowed_token_ids"] = p.allowed_token_ids ? json(*p.allowed_token_ids) : json(nullptr);
  d["banned_strings"] = p.banned_strings;
  json order = nullptr;
  if (p.sampler_priority) {
    order = json::array();
    for (SamplerId id : *p.sampler_priority) order.push_back(static_cast<int>(id));
  }
  d["sampler_priority"] = order;
  return d;
}

TEST(SamplerFields, EverySamplerNoteFieldReachesTheEngineOnEveryRoute) {
  const std::set<std::string> fields = sampler_note_fields();
  // The reader found the notes' fields (so the loop below is not vacuous).
  for (const char* f : {"xtc_threshold", "nsigma", "dry_penalty_last_n", "sampler_order", "dry_max_ngram", "bad_words",
                        "mirostat_eta", "dry_sequence_breaker_ids", "skew"}) {
    EXPECT_TRUE(fields.count(f)) << f;
  }
  TestServer s;
  for (const Route& route : routes()) {
    auto base = post_json(s, route.path, route.body.dump());
    ASSERT_EQ(base.status, 200) << route.path << " " << base.body;
    const json baseline = describe(*s.engine->submitted().back().params);
    for (const std::string& field : fields) {
      SCOPED_TRACE(std::string(route.path) + " " + field);
      const SamplingParamInfo* info = find_sampling_param(field);
      ASSERT_NE(info, nullptr) << "a sampler field Cypris does not know";
      json body = route.body;
      body[field] = non_default_value(*info);
      auto r = post_json(s, route.path, body.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_NE(describe(*s.engine->submitted().back().params), baseline) << "accepted but dropped";
    }
  }
}

TEST(SamplerFields, DynatempRangeOnEveryRoute) {
  TestServer s;
  for (const Route& route : routes()) {
    json body = route.body;
    body["temperature"] = 1.0;
    body["dynatemp_range"] = 0.5;
    auto r = post_json(s, route.path, body.dump());
    ASSERT_EQ(r.status, 200) << route.path << " " << r.body;
    const auto& p = *s.engine->submitted().back().params;
    EXPECT_FLOAT_EQ(p.dynatemp_min, 0.5f) << route.path;
    EXPECT_FLOAT_EQ(p.dynatemp_max, 1.5f) << route.path;
    body["dynatemp_range"] = "wide";
    r = post_json(s, route.path, body.dump());
    EXPECT_EQ(r.status, 400) << route.path;
    EXPECT_THAT(r.body, ::testing::HasSubstr("dynatemp_range"));
  }
}

TEST(RequestPriority, ReachesTheEngineUnderThePriorityPolicy) {
  TestServer s([](EngineConfig& c) { c.scheduler.scheduling_policy = "priority"; });
  for (const Route& route : routes()) {
    json body = route.body;
    body["priority"] = -3;
    auto r = post_json(s, route.path, body.dump());
    ASSERT_EQ(r.status, 200) << route.path << " " << r.body;
    EXPECT_EQ(s.engine->submitted().back().priority, -3) << route.path;
    body["priority"] = 1.5;
    r = post_json(s, route.path, body.dump());
    EXPECT_EQ(r.status, 400) << route.path;
  }
}

TEST(RequestPriority, IsRefusedUnderFcfsAsInVllm) {
  TestServer s;
  for (const Route& route : routes()) {
    json body = route.body;
    body["priority"] = 2;
    auto r = post_json(s, route.path, body.dump());
    EXPECT_EQ(r.status, 400) << route.path;
    EXPECT_THAT(r.body, ::testing::HasSubstr("--scheduling-policy priority"));
    body["priority"] = 0;
    EXPECT_EQ(post_json(s, route.path, body.dump()).status, 200) << route.path;
  }
}

// vLLM's return_tokens_as_token_ids: logprob tokens as "token_id:N", on completions and chat, so
// tokens that render alike (byte fallbacks, all U+FFFD) keep their own entries.
TEST(ReturnTokensAsTokenIds, CompletionsAndChatNameTokensById) {
  TestServer s;
  const Tokenizer* tok = s.engine->tokenizer();
  auto id_of = [&](const std::string& word) {
    const std::vector<int32_t> ids = tok->encode(word, false);
    EXPECT_EQ(ids.size(), 1u) << word;
    return "token_id:" + std::to_string(ids.empty() ? -1 : ids[0]);
  };
  auto r = post_json(s, "/v1/completions",
                     R"({"prompt":"a","max_tokens":2,"logprobs":2,"return_tokens_as_token_ids":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json& lp = r.json["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({id_of(" t0"), id_of(" t1")}));
  ASSERT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][0][id_of(" t0")].get<double>(), -0.5);
  for (const auto& [key, v] : lp["top_logprobs"][0].items()) EXPECT_EQ(key.rfind("token_id:", 0), 0u) << key;
  // The text itself is still text.
  EXPECT_EQ(r.json["choices"][0]["text"], fake::FakeEngine::expected_text(0, 2));
  // Streaming too.
  auto st =
      post_stream(s, "/v1/completions",
                  R"({"prompt":"a","max_tokens":2,"logprobs":1,"stream":true,"return_tokens_as_token_ids":true})");
  EXPECT_EQ(json::parse(st.events.at(0).data)["choices"][0]["logprobs"]["tokens"][0], id_of(" t0"));

  r = post_json(s, "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"logprobs":true,"top_logprobs":2,
                    "return_tokens_as_token_ids":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json& c = r.json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]["token"], id_of(" t0"));
  ASSERT_EQ(c[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(c[0]["top_logprobs"][0]["token"], id_of(" t0"));
  EXPECT_NE(c[0]["top_logprobs"][1]["token"], c[0]["top_logprobs"][0]["token"]);
  // Without the field: text, as before.
  r = post_json(s, "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"logprobs":true})");
  EXPECT_EQ(r.json["choices"][0]["logprobs"]["content"][0]["token"], " t0");
}

}  // namespace
