#include "app/server/openai/sampling_from_json.h"

#include <gtest/gtest.h>

#include "app/server/errors.h"

using namespace cypris;
using namespace cypris::server;
using nlohmann::json;

namespace {
SamplingParams parse(const std::string& body, SamplingDefaults d = {}) {
  return sampling_from_json(json::parse(body), d);
}

// Runs f and returns the HttpError's message ("" when nothing was thrown).
template <typename F>
std::string error_of(F f, int* status = nullptr) {
  try {
    f();
  } catch (const HttpError& e) {
    if (status) *status = e.status();
    return e.what();
  }
  return "";
}
}  // namespace

TEST(SamplingFromJson, DefaultsPerRoute) {
  auto p = parse("{}");
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_FLOAT_EQ(p.temperature, 1.0f);
  auto c = parse("{}", SamplingDefaults{std::nullopt, 0.7f});
  EXPECT_FALSE(c.max_tokens.has_value());
  EXPECT_FLOAT_EQ(c.temperature, 0.7f);
}

TEST(SamplingFromJson, SillyTavernAphroditeBody) {
  // Trimmed from the body SillyTavern sends (see the API notes), unknown keys included.
  auto p = parse(R"({"prompt":"x","model":"m","max_new_tokens":300,"max_tokens":300,"temperature":0.7,
    "top_p":0.5,"typical_p":1,"typical":1,"sampler_seed":-1,"min_p":0.05,"repetition_penalty":1.2,
    "top_k":0,"dry_sequence_breakers":"[\"\\n\",\":\",\"\\\"\",\"*\"]","dry_penalty_last_n":64,
    "stopping_strings":["\nUser:"],"stop":["\nUser:"],"ban_eos_token":false,"guided_json":{},
    "xtc_threshold":0.1,"n":2,"temperature_last":true,"early_stopping":false,"custom_token_bans":[],
    "logit_bias":{"42":-5.5},"api_server":"http://127.0.0.1:2242"})");
  EXPECT_EQ(p.max_tokens, 300);
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_FLOAT_EQ(p.top_p, 0.5f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.2f);
  EXPECT_EQ(p.top_k, -1);
  EXPECT_EQ(p.dry_sequence_breakers, (std::vector<std::string>{"\n", ":", "\"", "*"}));
  EXPECT_EQ(p.dry_range, 64);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\nUser:"}));
  EXPECT_EQ(p.n, 2);
  EXPECT_TRUE(p.temperature_last);
  EXPECT_FALSE(p.seed.has_value());
  ASSERT_EQ(p.logit_bias.count(42), 1u);
  EXPECT_FLOAT_EQ(p.logit_bias.at(42), -5.5f);
}

TEST(SamplingFromJson, AliasesAndLenientValues) {
  auto p = parse(R"({"max_new_tokens":5,"typical":0.9,"dynatemp_low":0.5,"dynatemp_high":1.5,"seed":-1,
                     "stop":"END","dry_sequence_breakers":["a"],"sampler_order":[6,0,1,3,4,2,5]})");
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_FLOAT_EQ(p.typical_p, 0.9f);
  EXPECT_FLOAT_EQ(p.dynatemp_min, 0.5f);
  EXPECT_FLOAT_EQ(p.dynatemp_max, 1.5f);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_EQ(p.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(p.dry_sequence_breakers, std::vector<std::string>{"a"});
  EXPECT_FALSE(p.sampler_priority.has_value());  // KoboldCpp numbering: ignored
  auto q = parse(R"({"seed":1234,"max_tokens":null,"sampler_priority":[0,1,2,3,4,5,6,7,8,9,10,11,12,13]})");
  EXPECT_EQ(q.seed, 1234u);
  EXPECT_FALSE(q.max_tokens.has_value());
  ASSERT_TRUE(q.sampler_priority.has_value());
  EXPECT_EQ(q.sampler_priority->size(), 14u);
}

TEST(SamplingFromJson, WrongTypesName400TheField) {
  struct Case {
    const char* body;
    const char* substr;
  } cases[] = {
      {R"({"temperature":"hot"})", "'temperature' must be a number"},
      {R"({"max_tokens":1.5})", "'max_tokens' must be an integer"},
      {R"({"n":"2"})", "'n' must be an integer"},
      {R"({"ignore_eos":"yes"})", "'ignore_eos' must be a boolean"},
      {R"({"stop":[1,2]})", "'stop' must be a list of strings"},
      {R"({"logit_bias":{"abc":1}})", "'logit_bias' keys must be token ids"},
      {R"({"logit_bias":{"5":1000}})", "'logit_bias' values must be in [-100, 100]"},
      {R"({"custom_token_bans":["a"]})", "'custom_token_bans' must be a list of integers"},
      {R"({"dry_sequence_breakers":"not json"})", "'dry_sequence_breakers'"},
      {R"({"sampler_priority":[0,1]})", "sampler_priority"},
      {R"({"early_stopping":"sometimes"})", "'early_stopping'"},
  };
  for (const auto& c : cases) {
    int status = 0;
    std::string msg = error_of([&] { parse(c.body); }, &status);
    EXPECT_EQ(status, 400) << c.body;
    EXPECT_NE(msg.find(c.substr), std::string::npos) << c.body << " -> " << msg;
  }
}

TEST(SamplingFromJson, GuidedDecodingFields) {
  // Falsy values mean "no grammar".
  EXPECT_FALSE(guided_from_json(json::parse(
                   R"({"guided_json":{},"guided_grammar":"","guided_regex":null,"response_format":{"type":"text"}})"))
                   .active());
  auto g = guided_from_json(json::parse(R"({"guided_regex":"a+"})"));
  EXPECT_EQ(g.kind, GuidedKind::Regex);
  EXPECT_EQ(g.text, "a+");
  g = guided_from_json(json::parse(R"({"response_format":{"type":"json_object"}})"));
  EXPECT_EQ(g.kind, GuidedKind::JsonObject);
  g = guided_from_json(json::parse(
      R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"integer"}}}})"));
  EXPECT_EQ(g.kind, GuidedKind::JsonSchema);
  EXPECT_EQ(json::parse(g.text), json::parse(R"({"type":"integer"})"));
  g = guided_from_json(json::parse(R"({"guided_json":"{\"type\":\"boolean\"}","guided_whitespace_pattern":" "})"));
  EXPECT_EQ(g.kind, GuidedKind::JsonSchema);
  EXPECT_EQ(g.whitespace_pattern, " ");
  g = guided_from_json(json::parse(R"({"guided_choice":["a","b"]})"));
  EXPECT_EQ(g.choices, (std::vector<std::string>{"a", "b"}));
  // guided_grammar: Lark, or GBNF when it uses "::=".
  EXPECT_EQ(guided_from_json(json::parse(R"({"guided_grammar":"start: \"a\""})")).kind, GuidedKind::Lark);
  EXPECT_EQ(guided_from_json(json::parse(R"({"guided_grammar":"root ::= \"a\""})")).kind, GuidedKind::Gbnf);
  EXPECT_EQ(guided_from_json(json::parse(R"({"grammar":"root ::= \"a\""})")).kind, GuidedKind::Gbnf);
}

TEST(SamplingFromJson, GuidedDecodingErrorsName400FieldAndPosition) {
  struct Case {
    const char* body;
    const char* substr;
  };
  const std::vector<Case> cases = {
      {R"J({"guided_regex":"a(?<=b)"})J", "lookbehind assertions are not supported at position 1"},
      {R"J({"guided_regex":5})J", "'guided_regex' must be a string"},
      {R"J({"guided_choice":"a"})J", "'guided_choice' must be an array of strings"},
      {R"J({"guided_json":{"type":"object","minProperties":1}})J", "'minProperties' is not supported"},
      {R"J({"guided_json":"{not json"})J", "not valid JSON"},
      {R"J({"grammar":"root ::= \"x\"\nitem ::= [b-a]"})J", "range out of order in character class at line 2, column 11"},
      {R"J({"guided_grammar":"start: x"})J", "rule 'x' is used but never defined"},
      {R"J({"response_format":{"type":"xml"}})J", "'response_format.type' must be"},
      {R"J({"response_format":{"type":"json_schema"}})J", "json_schema"},
      {R"J({"guided_regex":"a","guided_json":{"type":"string"}})J", "give only one"},
      {R"J({"guided_choice":[]})J", "'guided_choice' is empty"},
      {R"J({"guided_regex":"[^\\s\\S]"})J", "no text can satisfy it"},
      {R"J({"guided_json":{"$ref":"#"}})J", "no text can satisfy it"},
  };
  for (const auto& c : cases) {
    int status = 0;
    std::string msg = error_of([&] { guided_from_json(json::parse(c.body)); }, &status);
    EXPECT_EQ(status, 400) << c.body;
    EXPECT_NE(msg.find(c.substr), std::string::npos) << c.body << " -> " << msg;
  }
}
