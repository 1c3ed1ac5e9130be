// Hostile nesting (issue #26 item 1): every grammar front end refuses input nested deeper than
// kMaxNestingDepth with an error that names the field and states the limit, instead of recursing
// until the stack overflows (these inputs crashed the server with SIGSEGV). Input just inside the
// limit still compiles and matches, and a grammar of long rule chains (no nesting in the text, but
// a deep expansion for the matcher) is matched without recursion.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/common/error.h"
#include "engine/common/json_depth.h"
#include "engine/guided/ebnf.h"
#include "engine/guided/guided_decoding.h"
#include "engine/guided/json_schema.h"
#include "engine/guided/matcher.h"
#include "engine/guided/regex_grammar.h"
#include "tests/support/guided_test_util.h"

namespace cypris::guided {
namespace {

using test_util::error_of;
using test_util::matches;

std::string rep(std::string_view s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

const std::string kLimit = std::to_string(kMaxNestingDepth);

// The error names the field and states the limit.
void expect_limit(const std::string& err, const std::string& field) {
  EXPECT_NE(err.find(field), std::string::npos) << err.substr(0, 300);
  EXPECT_NE(err.find("more than " + kLimit + " levels deep"), std::string::npos) << err.substr(0, 300);
  EXPECT_LT(err.size(), 1000u) << "the message quotes the whole input";
}

Grammar compile_text(GuidedKind kind, const std::string& text, std::optional<std::string> ws = {}) {
  GuidedDecodingParams p;
  p.kind = kind;
  p.text = text;
  p.whitespace_pattern = std::move(ws);
  return *compile(p);
}

TEST(GuidedNesting, RegexGroupsAndStackedQuantifiers) {
  expect_limit(error_of([] { regex_grammar(rep("(", 20000) + "a" + rep(")", 20000)); }), "guided_regex");
  expect_limit(error_of([] { regex_grammar("a" + rep("*", 50000)); }), "guided_regex");
  expect_limit(error_of([] { regex_grammar(rep("(?:", 300) + "a" + rep(")", 300)); }), "guided_regex");
  // Groups and quantifiers add up: 200 groups each quantified 100 times nest 20,000 levels.
  expect_limit(error_of([] { regex_grammar(rep("(", 200) + "a" + rep(")" + rep("?", 100), 200)); }), "guided_regex");
  // Alternations nested in their first branch.
  expect_limit(error_of([] { regex_grammar(rep("(", 16000) + "a" + rep("|b)", 16000)); }), "guided_regex");
  // Inside the limit: compiles and matches what it should.
  const int ok = kMaxNestingDepth - 8;
  Grammar g = regex_grammar(rep("(", ok) + "a" + rep(")", ok) + "b+");
  EXPECT_TRUE(matches(g, "abb"));
  EXPECT_FALSE(matches(g, "a"));
  Grammar h = regex_grammar(rep("(a|", ok) + "c" + rep(")", ok));
  EXPECT_TRUE(matches(h, "a"));
  EXPECT_TRUE(matches(h, "c"));
  EXPECT_TRUE(matches(regex_grammar("x" + rep("*", ok)), "xxx"));
}

TEST(GuidedNesting, RegexErrorsQuoteAShortExcerpt) {
  const std::string err = error_of([] { regex_grammar(rep("a", 60000) + "\\1"); });
  EXPECT_NE(err.find("backreferences are not supported at position 60000"), std::string::npos) << err.substr(0, 300);
  EXPECT_LT(err.size(), 1000u);
}

TEST(GuidedNesting, GbnfGroupsAndQuantifierRuns) {
  expect_limit(error_of([] { gbnf_grammar("root ::= " + rep("(", 20000) + "\"a\"" + rep(")", 20000) + "\n"); }),
               "grammar");
  expect_limit(error_of([] { gbnf_grammar("root ::= " + rep("(", 100000) + "\"a\"" + rep(")", 100000)); }), "grammar");
  expect_limit(error_of([] { gbnf_grammar("root ::= \"a\"" + rep("*", 50000) + "\n"); }), "grammar");
  expect_limit(error_of([] { gbnf_grammar("root ::= \"a\"" + rep("?", 100000) + "\n"); }), "grammar");
  expect_limit(error_of([] { gbnf_grammar("root ::= [a]" + rep("{1,2}", 30000) + "\n"); }), "grammar");
  // A run of '[' is a class of '[' characters, never nesting: an ordinary error, no crash.
  EXPECT_NE(error_of([] { gbnf_grammar("root ::= " + rep("[", 100000)); }).find("grammar:"), std::string::npos);
  const int ok = kMaxNestingDepth - 8;
  Grammar g = gbnf_grammar("root ::= " + rep("(", ok) + "\"a\" | \"b\"" + rep(")", ok) + " \"!\"\n");
  EXPECT_TRUE(matches(g, "a!"));
  EXPECT_TRUE(matches(g, "b!"));
  EXPECT_FALSE(matches(g, "ab!"));
}

TEST(GuidedNesting, LarkGroupsBracketsAndQuantifierRuns) {
  expect_limit(error_of([] { lark_grammar("start: " + rep("(", 20000) + "\"a\"" + rep(")", 20000) + "\n"); }),
               "guided_grammar");
  expect_limit(error_of([] { lark_grammar("start: " + rep("[", 100000) + "\"a\"" + rep("]", 100000) + "\n"); }),
               "guided_grammar");
  expect_limit(error_of([] { lark_grammar("start: \"a\"" + rep("*", 50000) + "\n"); }), "guided_grammar");
  expect_limit(error_of([] { lark_grammar("start: \"a\"" + rep("?", 100000) + "\n"); }), "guided_grammar");
  expect_limit(error_of([] { lark_grammar("start: \"a\"" + rep("~1..2", 30000) + "\n"); }), "guided_grammar");
  // A /regex/ terminal has the regex limit (reported at the terminal).
  EXPECT_NE(error_of([] {
              lark_grammar("start: /" + rep("(", 30000) + "a" + rep(")", 30000) + "/\n");
            }).find("more than " + kLimit + " levels deep"),
            std::string::npos);
  const int ok = kMaxNestingDepth - 8;
  Grammar g = lark_grammar("start: " + rep("[", ok) + "\"a\"" + rep("]", ok) + " \"b\"\n");
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "b"));
}

std::string nested_objects(int depth) {
  return rep(R"({"type":"object","properties":{"a":)", depth) + R"({"type":"integer"})" + rep("}}", depth);
}
std::string nested_arrays(int depth) {
  return rep(R"({"type":"array","items":)", depth) + R"({"type":"integer"})" + rep("}", depth);
}

TEST(GuidedNesting, JsonSchemaDeepSchemas) {
  // Deeper than the JSON bound: refused before parsing (guided_json given as a string).
  std::string err = error_of([] { compile_text(GuidedKind::JsonSchema, nested_objects(10000)); });
  EXPECT_NE(err.find("guided_json"), std::string::npos) << err.substr(0, 300);
  EXPECT_NE(err.find(std::to_string(kMaxJsonNesting)), std::string::npos) << err.substr(0, 300);
  err = error_of([] { compile_text(GuidedKind::JsonSchema, nested_arrays(30000)); });
  EXPECT_NE(err.find(std::to_string(kMaxJsonNesting)), std::string::npos) << err.substr(0, 300);
  // Within the JSON bound but past the schema limit: the compiler's own limit.
  expect_limit(error_of([] { compile_text(GuidedKind::JsonSchema, nested_arrays(1000)); }), "guided_json");
  expect_limit(error_of([] { compile_text(GuidedKind::JsonSchema, nested_objects(400)); }), "guided_json");
  // An already parsed schema (a request body, a tool's parameters) of any depth: the compiler's limit.
  const auto deep = nlohmann::json::parse(nested_objects(10000));
  expect_limit(error_of([&] { json_schema_grammar(deep); }), "guided_json");
  const int ok = kMaxNestingDepth - 8;
  Grammar g = json_schema_grammar(nlohmann::json::parse(nested_arrays(ok)));
  EXPECT_TRUE(matches(g, rep("[", ok) + "7" + rep("]", ok)));
  EXPECT_FALSE(matches(g, rep("[", ok) + "\"x\"" + rep("]", ok)));
}

TEST(GuidedNesting, JsonSchemaRefChainsAndSelfMerges) {
  // A chain of 10,000 $ref (each definition refers to the next) nests the compiler like properties.
  nlohmann::json defs = nlohmann::json::object();
  for (int i = 0; i < 10000; ++i) defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d10000"] = {{"type", "integer"}};
  expect_limit(error_of([&] { json_schema_grammar({{"$ref", "#/$defs/d0"}, {"$defs", defs}}); }), "guided_json");
  // allOf that merges the root into itself, and a $ref that points at itself: errors, not a hang.
  EXPECT_NE(error_of([] { json_schema_grammar(nlohmann::json::parse(R"({"allOf":[{"$ref":"#"}]})")); }), "");
  EXPECT_NE(error_of([] {
              json_schema_grammar(
                  nlohmann::json::parse(R"({"allOf":[{"$ref":"#/$defs/a"}],"$defs":{"a":{"$ref":"#/$defs/a"}}})"));
            }),
            "");
}

TEST(GuidedNesting, JsonSchemaPatternsAndWhitespacePattern) {
  const std::string deep = rep("(", 30000) + "a" + rep(")", 30000);
  const std::string schema = nlohmann::json{{"type", "string"}, {"pattern", deep}}.dump();
  std::string err = error_of([&] { compile_text(GuidedKind::JsonSchema, schema); });
  expect_limit(err, "guided_json");
  EXPECT_NE(err.find("pattern"), std::string::npos) << err.substr(0, 300);
  err = error_of([&] { compile_text(GuidedKind::JsonSchema, R"({"type":"object"})", deep); });
  expect_limit(err, "guided_whitespace_pattern");
  err = error_of([&] { compile_text(GuidedKind::JsonObject, "", deep); });
  expect_limit(err, "guided_whitespace_pattern");
}

// r0 ::= r1 | "x", r1 ::= r2 | "x", ...: no nesting in the text, but the matcher's expansion
// of the first alternatives goes as deep as the chain is long (it used to recurse once per rule,
// and the FIRST-set analysis took one pass per rule: quadratic time). As long a chain as the
// grammar size limit allows.
TEST(GuidedNesting, LongRuleChainsMatchWithoutRecursion) {
  const int n = 9000;
  std::string text = "root ::= r0\n";
  for (int i = 0; i < n; ++i) text += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " | \"x\"\n";
  text += "r" + std::to_string(n) + " ::= \"y\"\n";
  Grammar g = gbnf_grammar(text);
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_TRUE(matches(g, "y"));
  EXPECT_FALSE(matches(g, "xy"));
}

TEST(GuidedNesting, JsonNestingScan) {
  EXPECT_EQ(json_nesting(R"({"a":[1,{"b":[]}]})"), 4u);
  EXPECT_EQ(json_nesting(R"({"a":"[[[[{{{{\"[["})"), 1u);  // brackets inside strings do not count
  EXPECT_EQ(json_nesting("[[[]]][[]]"), 3u);
  EXPECT_EQ(json_nesting(rep("[", 1000000)), kMaxJsonNesting + 1);  // stops counting past the limit
}

}  // namespace
}  // namespace cypris::guided
