// Issue #26 item 5: constraints no output can satisfy are refused with an error naming the
// conflict (they used to be dropped silently and answered with free text), branches that can never
// be completed are removed (the matcher never leads a model into a dead end), GBNF and regex
// refuse escapes that are not Unicode scalar values, and Lark's "~ n..m" repeats as documented.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/common/error.h"
#include "engine/guided/ebnf.h"
#include "engine/guided/guided_decoding.h"
#include "engine/guided/json_schema.h"
#include "engine/guided/matcher.h"
#include "engine/guided/regex_grammar.h"
#include "engine/request/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/guided_test_util.h"

namespace cypris::guided {
namespace {

using test_util::error_of;
using test_util::matches;

void expect_has(const std::string& err, const std::string& what) {
  EXPECT_NE(err.find(what), std::string::npos) << err;
}

TEST(GuidedUnsatisfiable, GrammarsThatMatchNothingAreRefused) {
  expect_has(error_of([] { regex_grammar("[^\\s\\S]"); }), "guided_regex: no text can satisfy it");
  expect_has(error_of([] { regex_grammar("a[^\\s\\S]+b"); }), "no text can satisfy it");
  expect_has(error_of([] { json_schema_grammar(nlohmann::json::parse(R"({"$ref":"#"})")); }),
             "guided_json: no text can satisfy it");
  expect_has(error_of([] {
               json_schema_grammar(nlohmann::json::parse(R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})"));
             }),
             "no text can satisfy it");
  expect_has(error_of([] { gbnf_grammar("root ::= \"x\" r\nr ::= \"y\" r\n"); }), "grammar: no text can satisfy it");
  // A recursive schema with a way out is fine.
  EXPECT_TRUE(matches(json_schema_grammar(nlohmann::json::parse(
                          R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"$ref":"#"}}]})")),
                      "[[1],2]"));
}

TEST(GuidedUnsatisfiable, DeadBranchesAreRemoved) {
  // "x" leads only into a rule without an end: the grammar is "y", and "x" is never allowed.
  Grammar g = gbnf_grammar("root ::= \"x\" r | \"y\"\nr ::= \"z\" r\n");
  EXPECT_TRUE(matches(g, "y"));
  StackArena arena(std::make_shared<Grammar>(g));
  Stepper st(arena);
  const ByteSet first = st.next_bytes(st.initial());
  EXPECT_FALSE(first.test('x'));
  EXPECT_TRUE(first.test('y'));
  Grammar r = regex_grammar("a([^\\s\\S]c)?|b");
  EXPECT_TRUE(matches(r, "a"));
  EXPECT_TRUE(matches(r, "b"));
}

TEST(GuidedUnsatisfiable, EscapesMustBeUnicodeScalarValues) {
  expect_has(error_of([] { gbnf_grammar("root ::= \"\\uD800\"\n"); }), "U+D800, a UTF-16 surrogate");
  expect_has(error_of([] { gbnf_grammar("root ::= [\\uDC00-\\uDFFF]\n"); }), "surrogate");
  expect_has(error_of([] { gbnf_grammar("root ::= \"\\U7FFFFFFF\"\n"); }), "U+7FFFFFFF, above U+10FFFF");
  expect_has(error_of([] { lark_grammar("start: \"\\U00110000\"\n"); }), "above U+10FFFF");
  expect_has(error_of([] { regex_grammar("\\uD800"); }), "surrogate");
  expect_has(error_of([] { regex_grammar("[\\x{DFFF}]"); }), "surrogate");
  // Raw bytes that are not UTF-8 (an encoded surrogate, an overlong form) are refused too.
  expect_has(error_of([] { gbnf_grammar("root ::= \"\xed\xa0\x80\"\n"); }), "invalid UTF-8");
  expect_has(error_of([] { regex_grammar("\xc0\xaf"); }), "invalid UTF-8");
  EXPECT_TRUE(matches(gbnf_grammar("root ::= \"\\U0001F600\\u00e9\"\n"), "\U0001F600\u00e9"));
}

TEST(GuidedUnsatisfiable, LarkRangeRepetition) {
  Grammar g = lark_grammar("start: \"a\" ~ 2..3 \"b\"~2\n");
  EXPECT_FALSE(matches(g, "abb"));
  EXPECT_TRUE(matches(g, "aabb"));
  EXPECT_TRUE(matches(g, "aaabb"));
  EXPECT_FALSE(matches(g, "aaaabb"));
  EXPECT_FALSE(matches(g, "aab"));
  Grammar t = lark_grammar("start: X\nX: (\"x\" | \"y\") ~ 1..2\n");
  EXPECT_TRUE(matches(t, "xy"));
  EXPECT_FALSE(matches(t, "xyx"));
}

std::shared_ptr<const TokenVocab> stories_vocab() {
  static auto v =
      vocab_from_tokenizer(*load_tokenizer(std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k"), 0, {});
  return v;
}

std::string restriction_error(const GuidedDecodingParams& g, const std::function<void(SamplingParams&)>& set) {
  GuidedDecoder dec(stories_vocab());
  SamplingParams p;
  p.guided = g;
  set(p);
  auto m = dec.make_matcher(g);
  return error_of([&] { check_token_restrictions(*m, p); });
}

GuidedDecodingParams choice(std::vector<std::string> c) {
  GuidedDecodingParams g;
  g.kind = GuidedKind::Choice;
  g.choices = std::move(c);
  return g;
}

GuidedDecodingParams regex(std::string r) {
  GuidedDecodingParams g;
  g.kind = GuidedKind::Regex;
  g.text = std::move(r);
  return g;
}

// The ids of the tokens whose bytes are a non-empty prefix of text.
std::vector<int32_t> prefix_tokens(const std::string& text) {
  auto v = stories_vocab();
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < v->size; ++id)
    if (!v->bytes[id].empty() && text.compare(0, v->bytes[id].size(), v->bytes[id]) == 0) ids.push_back(id);
  return ids;
}

TEST(GuidedUnsatisfiable, TokenRestrictionsAgainstTheGrammar) {
  auto v = stories_vocab();
  ASSERT_NE(v->bytes[5], "z");
  // allowed_token_ids [5] with guided_regex "zzz": token 5 is not a 'z'.
  std::string err =
      restriction_error(regex("zzz"), [](SamplingParams& p) { p.allowed_token_ids = std::vector<int32_t>{5}; });
  expect_has(err, "no output can satisfy both guided_regex and allowed_token_ids");
  expect_has(err, "none of the tokens the grammar allows first is permitted");
  // guided_choice ["yes"] with the tokens that could start it banned.
  err = restriction_error(choice({"yes"}), [](SamplingParams& p) { p.custom_token_bans = prefix_tokens("yes"); });
  expect_has(err, "guided_choice and custom_token_bans");
  // Only the tokens that could finish it banned ("es", "s", ...): found by the search.
  std::vector<int32_t> finish;
  for (const std::string& tail : {std::string("es"), std::string("s")})
    for (int32_t id : prefix_tokens(tail)) finish.push_back(id);
  for (int32_t id : prefix_tokens("yes"))
    if (v->bytes[id] == "yes" || v->bytes[id] == "ye") finish.push_back(id);
  err = restriction_error(choice({"yes"}), [&](SamplingParams& p) { p.custom_token_bans = finish; });
  expect_has(err, "every way the grammar can go runs into a token that is not permitted");
  // Restrictions that leave a way: accepted.
  EXPECT_EQ(
      restriction_error(choice({"yes", "no"}), [](SamplingParams& p) { p.custom_token_bans = prefix_tokens("yes"); }),
      "");
  EXPECT_EQ(restriction_error(regex("[a-z]+"), [](SamplingParams& p) { p.custom_token_bans = {5, 6, 7}; }), "");
}

TEST(GuidedUnsatisfiable, BansOfTheWholeVocabulary) {
  SamplingParams p;
  for (int32_t id = 0; id < 512; ++id) p.custom_token_bans.push_back(id);
  expect_has(error_of([&] { p.validate(20, 512); }),
             "custom_token_bans bans every token of the vocabulary (512 tokens)");
  p.custom_token_bans.pop_back();
  EXPECT_EQ(error_of([&] { p.validate(20, 512); }), "");
  p.custom_token_bans = {3, 4};
  p.allowed_token_ids = std::vector<int32_t>{4, 3, 3};
  expect_has(error_of([&] { p.validate(20, 512); }), "custom_token_bans bans every token of allowed_token_ids");
}

}  // namespace
}  // namespace cypris::guided
