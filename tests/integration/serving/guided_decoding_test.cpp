// Structured output on the real engine (stories260k, CPU) through the HTTP server, every output
// judged by a tool that is not ours:
//  - 34 JSON Schemas (tests/fixtures/guided/schemas.json) x kSamples completions at temperature 1.5
//    via guided_json / response_format, validated by python3-jsonschema (tests/tools/guided_judge.py);
//  - regexes via guided_regex, full-matched with PCRE2;
//  - Lark grammars via guided_grammar, parsed by python3-lark;
//  - llama.cpp's published GBNF grammars via "grammar": json.gbnf judged by Python's json module,
//    chess and list by hand-written PCRE2 patterns, arithmetic by a hand-written Lark grammar.
// The issue asks for 50 samples per schema; CI runs kSamples (n in one request: the n > 1 path) to
// stay fast. Outputs cut by max_tokens cannot be complete and are counted, not judged.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/regex.h"
#include "tests/support/hostile_guided.h"
#include "tests/support/stories_server.h"

namespace cypris {
namespace {

using nlohmann::json;

constexpr int kSamples = 6;

class GuidedServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing_support::StoriesServer(testing_support::start_stories_server());
    port_ = server_->port;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  struct Outputs {
    std::vector<std::string> texts;
    std::vector<bool> finished;
  };
  // A logit bias towards '"', '}' and ']': the story model writes stories inside unbounded JSON
  // strings and objects; the bias lets outputs end (the grammar still decides what is allowed).
  static json closing_bias() {
    json bias = json::object();
    httplib::Client c("127.0.0.1", port_);
    for (const char* piece : {"\"", "}", "]"}) {
      auto t =
          c.Post("/v1/tokenize", json{{"prompt", piece}, {"add_special_tokens", false}}.dump(), "application/json");
      EXPECT_TRUE(t && t->status == 200);
      if (t && t->status == 200) bias[std::to_string(json::parse(t->body)["tokens"].back().get<int>())] = 6;
    }
    return bias;
  }

  static Outputs complete(json body, int n = kSamples, int max_tokens = 160) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120);
    body["prompt"] = "Once upon a time";
    body["n"] = n;
    body["temperature"] = 1.5;
    body["max_tokens"] = max_tokens;
    body["seed"] = 1234;
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    Outputs o;
    if (!r) {
      ADD_FAILURE() << "no response";
      return o;
    }
    EXPECT_EQ(r->status, 200) << r->body;
    if (r->status != 200) return o;
    json j = json::parse(r->body);
    for (auto& ch : j["choices"]) {
      o.texts.push_back(ch["text"].get<std::string>());
      o.finished.push_back(ch["finish_reason"] == "stop");
    }
    return o;
  }
  static int judge(const std::vector<json>& cases) { return testing_support::run_guided_judge(cases); }
  static testing_support::StoriesServer* server_;
  static int port_;
};
testing_support::StoriesServer* GuidedServer::server_ = nullptr;
int GuidedServer::port_ = 0;

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_F(GuidedServer, JsonSchemasAreValidPerJsonschema) {
  json schemas = json::parse(read_file(std::string(CYPRIS_SOURCE_DIR) + "/tests/fixtures/guided/schemas.json"));
  ASSERT_GE(schemas.size(), 30u);
  std::vector<json> cases;
  size_t finished = 0, total = 0;
  for (size_t i = 0; i < schemas.size(); ++i) {
    // Alternate the request forms: vLLM's guided_json and OpenAI's response_format.
    json body = i % 2 ? json{{"guided_json", schemas[i]}}
                      : json{{"response_format",
                              {{"type", "json_schema"},
                               {"json_schema", {{"name", "s"}, {"schema", schemas[i]}, {"strict", true}}}}}};
    Outputs o = complete(body);
    ASSERT_EQ(o.texts.size(), static_cast<size_t>(kSamples)) << schemas[i].dump();
    for (bool f : o.finished) finished += f, ++total;
    cases.push_back({{"kind", "jsonschema"}, {"spec", schemas[i]}, {"outputs", o.texts}, {"finished", o.finished}});
  }
  int rc = judge(cases);
  if (rc == 77) GTEST_SKIP() << "python3-jsonschema / python3-lark not installed";
  EXPECT_EQ(rc, 0) << "see the INVALID lines above";
  // Almost every output must complete within max_tokens (a grammar that never lets the model stop
  // would fail here).
  EXPECT_GE(finished * 10, total * 8) << finished << " of " << total << " finished";
}

TEST_F(GuidedServer, JsonObjectParses) {
  Outputs o = complete({{"response_format", {{"type", "json_object"}}},
                        {"guided_whitespace_pattern", " ?"},
                        {"logit_bias", closing_bias()}},
                       12, 400);
  std::vector<json> cases{
      {{"kind", "jsonschema"}, {"spec", {{"type", "object"}}}, {"outputs", o.texts}, {"finished", o.finished}}};
  int rc = judge(cases);
  if (rc == 77) GTEST_SKIP();
  EXPECT_EQ(rc, 0);
}

// Issue #32: with nothing in the schema bounding them, numbers and whitespace still end. At
// temperature 1.5 the story model used to write 200-digit integers and `{ \n"kids" \n\n\n: ...` until
// max_tokens; now the longest text the grammar allows is about 150 bytes, so every sample must stop
// within 160 tokens, parse as JSON and hold no empty line.
TEST_F(GuidedServer, UnboundedNumbersAndWhitespaceEnd) {
  const json schema = json::parse(R"({"anyOf": [{"type": "integer"},
      {"type": "object", "properties": {"kids": {"type": "number"}}}]})");
  Outputs o = complete({{"guided_json", schema}}, 8, 160);
  ASSERT_EQ(o.texts.size(), 8u);
  for (size_t i = 0; i < o.texts.size(); ++i) {
    const std::string& t = o.texts[i];
    EXPECT_TRUE(o.finished[i]) << "ran to max_tokens: " << t;
    const json v = json::parse(t, nullptr, false);
    EXPECT_FALSE(v.is_discarded()) << t;
    EXPECT_TRUE(v.is_number_integer() || v.is_object()) << t;
    EXPECT_EQ(t.find("\n\n"), std::string::npos) << t;
    EXPECT_EQ(t.find(" \n"), std::string::npos) << t;
  }
}

TEST_F(GuidedServer, RegexOutputsFullMatchPerPcre2) {
  const std::vector<std::string> patterns = {"[A-Z][a-z]{2,8}( [a-z]{1,6}){0,4}\\.",
                                             "\\d{3}-\\d{4}",
                                             "(cat|dog|bird)s?( and (cat|dog|bird)s?)*",
                                             "[^\\n]{5,20}",
                                             "(0|[1-9][0-9]*)(\\.[0-9]+)?",
                                             "[a-f0-9]{8}(-[a-f0-9]{4}){3}",
                                             "(ab|cd){2,5}x?"};
  for (const auto& p : patterns) {
    Outputs o = complete({{"guided_regex", p}}, kSamples, 60);
    Regex re("(?:" + p + ")\\z", false, "test pattern");
    for (size_t i = 0; i < o.texts.size(); ++i) {
      if (!o.finished[i]) continue;
      EXPECT_TRUE(re.matches_at(o.texts[i], 0)) << "pattern " << p << " output " << json(o.texts[i]).dump();
    }
  }
}

TEST_F(GuidedServer, ChoiceIsOneOfTheChoices) {
  Outputs o = complete({{"guided_choice", {"happy", "sad", "a long answer"}}}, 8, 20);
  for (size_t i = 0; i < o.texts.size(); ++i) {
    EXPECT_TRUE(o.finished[i]);
    EXPECT_TRUE(o.texts[i] == "happy" || o.texts[i] == "sad" || o.texts[i] == "a long answer") << o.texts[i];
  }
}

TEST_F(GuidedServer, BeamSearchStaysInTheGrammar) {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(60);
  json body = {{"prompt", "Once upon a time"},
               {"max_tokens", 30},
               {"temperature", 0},
               {"use_beam_search", true},
               {"best_of", 3},
               {"n", 2},
               {"guided_regex", "(Lily|Tom) (was|had) [a-z]{2,8}\\."}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Regex re("(?:Lily|Tom) (?:was|had) [a-z]{2,8}\\.\\z", false, "beam");
  for (auto& ch : json::parse(r->body)["choices"]) {
    const std::string text = ch["text"];
    EXPECT_TRUE(re.matches_at(text, 0)) << text;
  }
}

TEST_F(GuidedServer, LarkGrammarsParsePerLark) {
  const std::vector<std::string> grammars = {
      R"G(?start: select_statement
?select_statement: "SELECT " column_list " FROM " table_name
?column_list: column_name ("," column_name)*
?table_name: identifier
?column_name: identifier
?identifier: /[a-zA-Z_][a-zA-Z0-9_]{0,8}/
)G",
      R"G(start: pair ("," pair)*
pair: KEY "=" VALUE
KEY: /[a-z]{1,6}/
VALUE: SIGNED_INT | "true" | "false"
%import common.SIGNED_INT
%import common.WS_INLINE
%ignore WS_INLINE
)G",
      R"G(start: sentence+
sentence: WORD (" " WORD)* ("." | "!") " "?
WORD: /[a-z]{1,7}/
)G"};
  std::vector<json> cases;
  for (const auto& g : grammars) {
    Outputs o = complete({{"guided_grammar", g}}, kSamples, 80);
    cases.push_back({{"kind", "lark"}, {"spec", g}, {"outputs", o.texts}, {"finished", o.finished}});
  }
  int rc = judge(cases);
  if (rc == 77) GTEST_SKIP();
  EXPECT_EQ(rc, 0);
}

TEST_F(GuidedServer, LlamaCppGbnfExamples) {
  const std::string dir = std::string(CYPRIS_SOURCE_DIR) + "/tests/fixtures/gbnf/";
  // json.gbnf: Python's json module is the judge.
  // Its strings and objects are unbounded and the story model writes stories in them: a logit
  // bias towards '"', '}' and ']' lets outputs end (the grammar still decides what is allowed).
  Outputs js = complete({{"grammar", read_file(dir + "json.gbnf")}, {"logit_bias", closing_bias()}}, 16, 320);
  std::vector<json> cases{{{"kind", "json"}, {"spec", nullptr}, {"outputs", js.texts}, {"finished", js.finished}}};
  // arithmetic.gbnf, judged by the same language written by hand in Lark.
  Outputs ar = complete({{"grammar", read_file(dir + "arithmetic.gbnf")}}, kSamples, 60);
  cases.push_back({{"kind", "lark"},
                   // (Lark's dynamic lexer refuses zero-width terminals: ws is an optional WSC.)
                   {"spec",
                    "start: (expr \"=\" ws term \"\\n\")+\nexpr: term (OP term)*\nOP: /[-+*\\/]/\n"
                    "term: ident | num | \"(\" ws expr \")\" ws\nident: /[a-z][a-z0-9_]*/ ws\n"
                    "num: /[0-9]+/ ws\nws: WSC?\nWSC: /[ \\t\\n]+/\n"},
                   {"outputs", ar.texts},
                   {"finished", ar.finished}});
  int rc = judge(cases);
  if (rc == 77) GTEST_SKIP();
  EXPECT_EQ(rc, 0);
  // chess.gbnf and list.gbnf are regular: PCRE2 patterns written by hand from the grammar text.
  const std::string move = "(?:(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?[a-h][1-8]|O-O(?:-O)?)[+#]?";
  Regex chess("1\\. " + move + " " + move + "\\n(?:[1-9][0-9]?\\. " + move + " " + move + "\\n)+\\z", false, "chess");
  Outputs ch = complete({{"grammar", read_file(dir + "chess.gbnf")}}, kSamples, 60);
  for (size_t i = 0; i < ch.texts.size(); ++i)
    if (ch.finished[i]) EXPECT_TRUE(chess.matches_at(ch.texts[i], 0)) << json(ch.texts[i]).dump();
  Regex list("(?:- [^\\r\\n\\x0b\\x0c\\x{85}\\x{2028}\\x{2029}]+\\n)+\\z", false, "list");
  Outputs li = complete({{"grammar", read_file(dir + "list.gbnf")}}, kSamples, 60);
  for (size_t i = 0; i < li.texts.size(); ++i)
    if (li.finished[i]) EXPECT_TRUE(list.matches_at(li.texts[i], 0)) << json(li.texts[i]).dump();
}

TEST_F(GuidedServer, KoboldGrammarField) {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(60);
  json body = {{"prompt", "Once upon a time"},
               {"max_length", 20},
               {"temperature", 1.5},
               {"sampler_seed", 3},
               {"grammar", "root ::= (\"yes\" | \"no\") \".\"\n"},
               {"grammar_retain_state", false}};
  auto r = c.Post("/api/v1/generate", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string text = json::parse(r->body)["results"][0]["text"];
  EXPECT_TRUE(text == "yes." || text == "no.") << text;
}

TEST_F(GuidedServer, BadSchemasGrammarsAndRegexesAre400WithThePosition) {
  httplib::Client c("127.0.0.1", port_);
  auto post = [&](json body) {
    body["prompt"] = "x";
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  auto [s1, b1] = post({{"guided_regex", "ab(?=c)"}});
  EXPECT_EQ(s1, 400);
  EXPECT_NE(b1.find("lookahead assertions are not supported at position 2"), std::string::npos) << b1;
  auto [s2, b2] = post({{"guided_json", {{"type", "object"}, {"patternProperties", json::object()}}}});
  EXPECT_EQ(s2, 400);
  EXPECT_NE(b2.find("patternProperties"), std::string::npos) << b2;
  auto [s3, b3] = post({{"guided_grammar", "start: \"a\" (\n"}});
  EXPECT_EQ(s3, 400);
  EXPECT_NE(b3.find("line 1"), std::string::npos) << b3;
  auto [s4, b4] = post({{"guided_regex", "a"}, {"guided_choice", {"a"}}});
  EXPECT_EQ(s4, 400);
  EXPECT_NE(b4.find("give only one"), std::string::npos) << b4;
}

// Issue #26 item 1: the 25 nesting-depth requests that crashed the server (stack overflow) are
// each a 400 stating the limit, and the server answers the next request.
TEST_F(GuidedServer, HostileNestingIsA400StatingTheLimit) {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(60);
  for (const auto& hc : testing_support::hostile_guided_cases()) {
    auto r = c.Post(hc.route, hc.body, "application/json");
    ASSERT_TRUE(r) << hc.name << ": no response (the server died?)";
    EXPECT_EQ(r->status, 400) << hc.name << ": " << r->body.substr(0, 300);
    EXPECT_TRUE(testing_support::states_nesting_limit(r->body))
        << hc.name << ": " << r->body.substr(0, 300);
  }
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

// Issue #26 item 3: a request the engine would refuse anyway (max_tokens past the context) is
// refused before its grammar is compiled: the answer is the context error, not the grammar's.
TEST_F(GuidedServer, CheapFieldsAreCheckedBeforeTheGrammarIsCompiled) {
  httplib::Client c("127.0.0.1", port_);
  const std::string bad_regex = "a(?=b)";  // would be a 400 of its own if it were compiled
  auto r = c.Post("/v1/completions",
                  json{{"prompt", "Once"}, {"max_tokens", 100000}, {"guided_regex", bad_regex}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("maximum context length"), std::string::npos) << r->body;
  r = c.Post("/v1/chat/completions",
             json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 100000},
                  {"guided_json", {{"type", "object"}, {"patternProperties", json::object()}}}}
                 .dump(),
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("maximum context length"), std::string::npos) << r->body;
  // Within the context, the grammar's own error.
  r = c.Post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 4}, {"guided_regex", bad_regex}}.dump(),
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("lookahead"), std::string::npos) << r->body;
}

// Issue #26 item 5: constraints no output can satisfy are a 400 naming the conflict, not a 200
// with free text.
TEST_F(GuidedServer, UnsatisfiableConstraintsAre400NamingTheConflict) {
  httplib::Client c("127.0.0.1", port_);
  auto post = [&](json body) {
    body["prompt"] = "Once";
    body["max_tokens"] = 8;
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  std::vector<int> all(512);
  for (int i = 0; i < 512; ++i) all[i] = i;
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"guided_regex", "[^\\s\\S]"}}, "no text can satisfy it"},
      {{{"guided_json", {{"$ref", "#"}}}}, "no text can satisfy it"},
      {{{"guided_regex", "zzz"}, {"allowed_token_ids", json::array({5})}}, "guided_regex and allowed_token_ids"},
      {{{"guided_choice", json::array()}}, "'guided_choice' is empty"},
      {{{"custom_token_bans", all}}, "custom_token_bans bans every token"},
      {{{"grammar", "root ::= \"\\uD800\""}}, "surrogate"},
  };
  for (const auto& [body, expected] : cases) {
    auto [status, text] = post(body);
    EXPECT_EQ(status, 400) << body.dump() << " -> " << text;
    EXPECT_NE(text.find(expected), std::string::npos) << body.dump() << " -> " << text;
  }
}

}  // namespace
}  // namespace cypris
