// JSON Schema grammars that end (issue #32): a number the schema leaves unbounded has at most 16
// digits in its integer part, fraction and exponent, and the default whitespace between JSON tokens
// is at most one newline plus indentation, so a sampled answer cannot run to max_tokens inside a
// number or a run of newlines. Checked on the grammar's language: the longest run of a byte the
// matcher accepts, and whole texts accepted or refused.
#include "engine/guided/json_schema.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/guided/matcher.h"
#include "tests/support/guided_test_util.h"

namespace cypris::guided {
namespace {

using nlohmann::json;
using test_util::matches;

// How many copies of `c` the grammar accepts after `prefix` (stops looking at `cap`).
int longest_run(const Grammar& g, const std::string& prefix, char c, int cap = 400) {
  StackArena arena(std::make_shared<Grammar>(g));
  Stepper st(arena);
  MatchState s = st.initial();
  if (!st.advance(s, prefix)) return -1;
  int n = 0;
  while (n < cap && st.advance(s, std::string(1, c))) ++n;
  return n;
}

Grammar schema(const json& s, std::optional<std::string> ws = std::nullopt) {
  JsonSchemaOptions o;
  o.whitespace_pattern = std::move(ws);
  return json_schema_grammar(s, o);
}

TEST(JsonSchemaNumbers, UnboundedIntegerHasAtMost16Digits) {
  const Grammar g = schema({{"type", "integer"}});
  EXPECT_EQ(longest_run(g, "", '7'), 16);
  EXPECT_EQ(longest_run(g, "-", '7'), 16);
  EXPECT_TRUE(matches(g, std::string(16, '9')));
  EXPECT_FALSE(matches(g, std::string(17, '9')));
  EXPECT_TRUE(matches(g, "-1234567890123456"));
  EXPECT_TRUE(matches(g, "0"));
  EXPECT_FALSE(matches(g, "01"));
  // The issue's case: an integer as one branch of anyOf.
  const Grammar any = schema(json::parse(R"({"anyOf": [{"type": "integer"}, {"type": "object",
      "properties": {"kids": {"type": "integer"}}}]})"));
  EXPECT_EQ(longest_run(any, "", '3'), 16);
  EXPECT_EQ(longest_run(any, "{\"kids\": ", '3'), 16);
}

TEST(JsonSchemaNumbers, NumberPartsHaveAtMost16DigitsEach) {
  const Grammar g = schema({{"type", "number"}});
  EXPECT_EQ(longest_run(g, "", '5'), 16);
  EXPECT_EQ(longest_run(g, "1.", '5'), 16);
  EXPECT_EQ(longest_run(g, "1.5e", '5'), 16);
  EXPECT_EQ(longest_run(g, "-2E+", '0'), 16);
  EXPECT_TRUE(matches(g, "-1234567890123456.1234567890123456e-1234567890123456"));
  EXPECT_FALSE(matches(g, "1.12345678901234567"));
  // Any JSON value (json_object's grammar) has the same bound inside.
  const Grammar obj = json_object_grammar();
  EXPECT_EQ(longest_run(obj, "{\"a\":", '9'), 16);
  EXPECT_EQ(longest_run(obj, "{\"a\":[0.", '9'), 16);
}

TEST(JsonSchemaNumbers, SchemaBoundsWidenTheDigits) {
  // A minimum of 10^17 needs 18 digits; a maximum bounds the count as it always did.
  const Grammar big = schema({{"type", "integer"}, {"minimum", 100000000000000000LL}});
  EXPECT_TRUE(matches(big, "100000000000000000"));
  EXPECT_EQ(longest_run(big, "", '9'), 18);
  const Grammar small = schema({{"type", "integer"}, {"minimum", 0}, {"maximum", 500}});
  EXPECT_EQ(longest_run(small, "", '4'), 3);
  // A number bounded below only: its fraction is still bounded.
  const Grammar num = schema({{"type", "number"}, {"minimum", 0}});
  EXPECT_EQ(longest_run(num, "", '1'), 16);
  EXPECT_EQ(longest_run(num, "3.", '1'), 16);
  EXPECT_FALSE(matches(num, "-1"));
}

TEST(JsonSchemaWhitespace, DefaultIsOneNewlinePlusIndentation) {
  const json s = json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "array", "items": {"type": "boolean"}}}, "required": ["a"]})");
  const Grammar g = schema(s);
  // Compact, spaced and pretty-printed JSON are all accepted.
  EXPECT_TRUE(matches(g, R"({"a":1,"b":[true,false]})"));
  EXPECT_TRUE(matches(g, R"({ "a" : 1 , "b" : [ true ] })"));
  EXPECT_TRUE(matches(g, "{\n  \"a\": 1,\n  \"b\": [\n    true,\n    false\n  ]\n}"));
  EXPECT_TRUE(matches(g, "{\n\t\"a\": 1\n}"));
  // Piles of whitespace are not.
  EXPECT_FALSE(matches(g, "{\n\n\"a\": 1}"));
  EXPECT_FALSE(matches(g, "{ \n\"a\": 1}"));
  EXPECT_FALSE(matches(g, "{\"a\" \n\n\n: 1}"));
  EXPECT_FALSE(matches(g, "{\"a\":  1}"));
  EXPECT_EQ(longest_run(g, "{", '\n'), 1);
  EXPECT_EQ(longest_run(g, "{\n", ' '), 20);
  EXPECT_EQ(longest_run(g, "{", ' '), 1);
  // An object that may be empty: one whitespace site between its braces, not two.
  const Grammar opt_obj = schema(json::parse(R"({"type": "object", "properties": {"k": {"type": "boolean"}}})"));
  for (const char* ok : {"{}", "{ }", "{\n}", "{\n  \"k\": true\n}", "{\"k\":false}"}) EXPECT_TRUE(matches(opt_obj, ok)) << ok;
  for (const char* bad : {"{\n\n}", "{ \n}", "{  }"}) EXPECT_FALSE(matches(opt_obj, bad)) << bad;
  // The tool-call array of tool_choice "required" is JSON Schema too: between calls the same.
  const Grammar arr = schema(json::parse(R"({"type": "array", "items": {"type": "integer"}})"));
  EXPECT_TRUE(matches(arr, "[\n  1,\n  2\n]"));
  EXPECT_FALSE(matches(arr, "[1,\n\n\n2]"));
}

TEST(JsonSchemaWhitespace, PatternOverridesTheDefault) {
  const json s = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  const Grammar loose = schema(s, std::string("[ \\n]*"));
  EXPECT_TRUE(matches(loose, "{\n\n\n\"a\"  :  1\n\n}"));
  const Grammar single = schema(s, std::string(" ?"));
  EXPECT_TRUE(matches(single, R"({ "a": 1 })"));
  EXPECT_FALSE(matches(single, "{\n\"a\": 1}"));
}

}  // namespace
}  // namespace cypris::guided
