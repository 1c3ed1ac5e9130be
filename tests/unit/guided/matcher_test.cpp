// The grammar front ends and the byte matcher: texts a grammar must accept and texts it must refuse,
// and the errors for grammars and regexes that cannot be used.
#include "engine/guided/matcher.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/guided/ebnf.h"
#include "engine/guided/json_schema.h"
#include "engine/guided/regex_grammar.h"
#include "tests/support/guided_test_util.h"

namespace cypris::guided {
namespace {

using test_util::error_of;
using test_util::matches;

TEST(GuidedMatcher, RegexFullMatch) {
  Grammar g = regex_grammar("[a-c]{2,3}(x|yz)*\\d?");
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "abcxyzx5"));
  EXPECT_FALSE(matches(g, "a"));
  EXPECT_FALSE(matches(g, "abcd"));
  EXPECT_FALSE(matches(g, "abxy"));
  Grammar u = regex_grammar("[^a]é.");
  EXPECT_TRUE(matches(u, "bé€"));
  EXPECT_TRUE(matches(u, "ééé"));
  EXPECT_FALSE(matches(u, "aé€"));
  EXPECT_FALSE(matches(u, "bé\n"));
}

TEST(GuidedMatcher, RegexRefusalsNamePosition) {
  EXPECT_NE(error_of([] { regex_grammar("(a)\\1"); }).find("backreferences are not supported at position 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("a(?=b)"); }).find("lookahead assertions are not supported at position 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("x(?<!b)"); }).find("lookbehind"), std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("ab[c"); }).find("unterminated character class at position 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("a{3,1}"); }).find("max < min"), std::string::npos);
}

// Code point escapes: \xHH, \uHHHH and the braced forms; a braced escape that is unterminated, empty,
// too long or beyond Unicode is refused (it used to read past the end or wrap around silently).
TEST(GuidedMatcher, RegexCodePointEscapes) {
  EXPECT_TRUE(matches(regex_grammar("\\x41\\u00e9\\x{20AC}\\u{1F600}"), "A\u00e9\u20ac\U0001F600"));
  EXPECT_NE(error_of([] { regex_grammar("a\\x{41"); }).find("unterminated"), std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("\\x{}"); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("\\x{1234567}"); }).find("more than 6 hex digits"), std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("\\u{110000}"); }).find("above U+10FFFF"), std::string::npos);
  EXPECT_NE(error_of([] { regex_grammar("\\x{4G}"); }).find("hex digits"), std::string::npos);
}

TEST(GuidedMatcher, GbnfArithmetic) {
  Grammar g = gbnf_grammar(R"G(
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)G");
  EXPECT_TRUE(matches(g, "a+1=b\n"));
  EXPECT_TRUE(matches(g, "(x *2)=3\n"));
  EXPECT_FALSE(matches(g, "(x * 2)=3\n"));  // a term cannot start with a space
  EXPECT_FALSE(matches(g, "a+=b\n"));
  EXPECT_FALSE(matches(g, "a=b"));
}

TEST(GuidedMatcher, GbnfErrorsNameLineAndColumn) {
  EXPECT_NE(error_of([] { gbnf_grammar("root ::= foo\n"); }).find("rule 'foo' is used but never defined"),
            std::string::npos);
  EXPECT_NE(error_of([] { gbnf_grammar("root ::= \"a\nb\"\n"); }).find("at line 1, column 10"), std::string::npos);
  EXPECT_NE(error_of([] { gbnf_grammar("root ::= root \"a\" | \"b\"\n"); }).find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of([] { gbnf_grammar("item ::= \"a\"\n"); }).find("no 'root' rule"), std::string::npos);
}

TEST(GuidedMatcher, LarkWithIgnoreAndCommon) {
  Grammar g = lark_grammar(R"G(
?start: select_statement
?select_statement: "SELECT " column_list " FROM " table_name
?column_list: column_name ("," column_name)*
?table_name: identifier
?column_name: identifier
?identifier: /[a-zA-Z_][a-zA-Z0-9_]*/
)G");
  EXPECT_TRUE(matches(g, "SELECT a,b FROM t"));
  EXPECT_FALSE(matches(g, "SELECT a, FROM t"));
  Grammar h = lark_grammar(R"G(
start: pair ("," pair)*
pair: CNAME "=" NUMBER
%import common.CNAME
%import common.NUMBER
%import common.WS
%ignore WS
)G");
  EXPECT_TRUE(matches(h, "a=1, b = 2.5"));
  EXPECT_TRUE(matches(h, " a=1 "));
  EXPECT_FALSE(matches(h, "a=1,"));
  auto err = error_of([] { lark_grammar("start: x\n%declare X\n"); });
  EXPECT_NE(err.find("%declare is not supported"), std::string::npos) << err;
  EXPECT_NE(err.find("at line 2, column 1"), std::string::npos) << err;
}

TEST(GuidedMatcher, JsonSchemaObject) {
  auto schema = nlohmann::json::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                   "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
    "required": ["name"]})");
  Grammar g = json_schema_grammar(schema);
  EXPECT_TRUE(matches(g, R"({"name":"bob"})"));
  EXPECT_TRUE(matches(g, R"({ "age": 7, "name" : "al", "tags": ["a","b"] })"));
  EXPECT_FALSE(matches(g, R"({"age":7})"));
  EXPECT_FALSE(matches(g, R"({"name":"bob","age":121})"));
  EXPECT_FALSE(matches(g, R"({"name":"bobbyx"})"));
  EXPECT_FALSE(matches(g, R"({"name":"b","tags":["a","b","a"]})"));
  EXPECT_FALSE(matches(g, R"({"name":"b","x":1})"));
}

TEST(GuidedMatcher, JsonSchemaRecursiveRef) {
  auto schema = nlohmann::json::parse(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
     "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
     "required": ["v"]}}})");
  Grammar g = json_schema_grammar(schema);
  EXPECT_TRUE(matches(g, R"({"kids":[{"v":1},{"kids":[],"v":-2}],"v":0})"));
  EXPECT_FALSE(matches(g, R"({"kids":[{}],"v":0})"));
}

TEST(GuidedMatcher, JsonSchemaRefusesUnsupportedKeywords) {
  auto err =
      error_of([] { json_schema_grammar(nlohmann::json::parse(R"({"type":"object","patternProperties":{}})")); });
  EXPECT_NE(err.find("'patternProperties' is not supported"), std::string::npos) << err;
  err = error_of([] {
    json_schema_grammar(nlohmann::json::parse(R"({"properties":{"a":{"type":"string","format":"hostname"}}})"));
  });
  EXPECT_NE(err.find("format 'hostname'"), std::string::npos) << err;
  EXPECT_NE(err.find("/properties/a/format"), std::string::npos) << err;
  err = error_of([] { json_schema_grammar(nlohmann::json::parse(R"({"type":"string","pattern":"(a)\\1"})")); });
  EXPECT_NE(err.find("backreferences are not supported at position 3"), std::string::npos) << err;
}

}  // namespace
}  // namespace cypris::guided
