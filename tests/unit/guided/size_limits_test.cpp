// Issue #26 item 3: sizes checked before anything is built (regex length, grammar text, schema
// values, choices) and the compile step budget, each a named error stating the limit.
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
#include "tests/support/guided_test_util.h"

namespace cypris::guided {
namespace {

using test_util::error_of;

std::string rep(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

void expect_has(const std::string& err, const std::string& what) {
  EXPECT_NE(err.find(what), std::string::npos) << err.substr(0, 400);
}

TEST(GuidedSizeLimits, CheckedBeforeBuilding) {
  expect_has(error_of([] { regex_grammar(rep("a", kMaxPatternBytes + 1)); }),
             "guided_regex: the regex is " + std::to_string(kMaxPatternBytes + 1) + " bytes long; at most " +
                 std::to_string(kMaxPatternBytes) + " (the limit)");
  EXPECT_NO_THROW(regex_grammar(rep("a", 1000)));
  expect_has(error_of([] { gbnf_grammar("root ::= \"a\"\n" + rep("#", kMaxGrammarTextBytes)); }),
             "grammar: the grammar is");
  expect_has(error_of([] { lark_grammar("start: \"a\"\n" + rep("//", kMaxGrammarTextBytes)); }),
             "at most " + std::to_string(kMaxGrammarTextBytes) + " (the limit)");
  // A schema of more JSON values than the limit: refused by counting, before compiling.
  nlohmann::json big = {{"enum", nlohmann::json::array()}};
  for (size_t i = 0; i <= kMaxSchemaNodes; ++i) big["enum"].push_back(static_cast<int>(i));
  expect_has(error_of([&] { json_schema_grammar(big); }),
             "more than " + std::to_string(kMaxSchemaNodes) + " JSON values (the limit)");
  GuidedDecodingParams many;
  many.kind = GuidedKind::Choice;
  many.choices.assign(kMaxChoices + 1, "x");
  expect_has(error_of([&] { compile(many); }), "guided_choice: " + std::to_string(kMaxChoices + 1) + " choices");
  GuidedDecodingParams long_choices;
  long_choices.kind = GuidedKind::Choice;
  long_choices.choices.assign(3, rep("y", kMaxChoiceBytes / 2));
  expect_has(error_of([&] { compile(long_choices); }), "guided_choice: the choices hold");
}

// A schema text with a number past a double (found by GuidedFuzz): a named error like any other
// bad JSON, not an escaping library exception.
TEST(GuidedSizeLimits, SchemaNumbersPastADoubleAreAnError) {
  GuidedDecodingParams p;
  p.kind = GuidedKind::JsonSchema;
  p.text = R"({"type":"integer","maximum":1e400})";
  expect_has(error_of([&] { compile(p); }), "guided_json: the schema is not valid JSON");
}

// The step budget ends a compile that would work too long, with a named error; a budget opened
// outside (as compile() does) is shared by the front ends inside it.
TEST(GuidedSizeLimits, CompileStepBudget) {
  {
    CompileBudget budget("guided_regex", 5000);
    expect_has(error_of([] { regex_grammar("([a-z]{100}\\d){1,100}"); }),
               "guided_regex: compiling this grammar takes more than 5000 steps (the limit)");
  }
  {
    CompileBudget budget("guided_json", 20000);
    const std::string err = error_of([] {
      json_schema_grammar(nlohmann::json::parse(R"({"type":"object","properties":{)" + [] {
        std::string p;
        for (int i = 0; i < 3000; ++i)
          p += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":{\"type\":\"integer\"}";
        return p;
      }() + "}}"));
    });
    expect_has(err, "more than 20000 steps (the limit)");
  }
  // Without an outer budget the default one applies: realistic grammars are far inside it.
  EXPECT_EQ(CompileBudget::used(), 0u);
  EXPECT_NO_THROW(regex_grammar("([a-z]{100}\\d){1,100}"));
}

}  // namespace
}  // namespace cypris::guided
