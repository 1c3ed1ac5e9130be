// Tool-call parsers (app/server/openai/tool_parsers.h): the complete parse of each format, and the
// streamed parse fed in random pieces, which must give the same content and calls.
#include "app/server/openai/tool_parsers.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace cypris::server {
namespace {

using F = ToolCallFormat;
using nlohmann::json;

ParsedToolOutput streamed(F f, const std::string& text, uint32_t seed, const std::string& named = "") {
  std::mt19937 rng(seed);
  ToolCallParser p(f, true, named);
  std::vector<ToolStreamEvent> all;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = std::min(text.size() - i, size_t(1 + rng() % 7));
    for (auto& e : p.feed(std::string_view(text).substr(i, n))) all.push_back(std::move(e));
    i += n;
  }
  for (auto& e : p.finish()) all.push_back(std::move(e));
  return collect_tool_events(all);
}

// The complete parse, checked against the streamed parse for many random splits.
ParsedToolOutput parse_both(F f, const std::string& text, const std::string& named = "") {
  ParsedToolOutput whole = parse_tool_calls(f, text, named);
  for (uint32_t seed = 0; seed < 40; ++seed) {
    ParsedToolOutput s = streamed(f, text, seed, named);
    EXPECT_EQ(s.content, whole.content) << "seed " << seed << " text " << text;
    EXPECT_EQ(s.calls.size(), whole.calls.size()) << "seed " << seed << " text " << text;
    for (size_t k = 0; k < std::min(s.calls.size(), whole.calls.size()); ++k) {
      EXPECT_EQ(s.calls[k].name, whole.calls[k].name) << "seed " << seed;
      EXPECT_EQ(s.calls[k].arguments, whole.calls[k].arguments) << "seed " << seed;
    }
  }
  return whole;
}

void expect_call(const ParsedToolOutput& p, size_t i, const std::string& name, const json& args) {
  ASSERT_LT(i, p.calls.size());
  EXPECT_EQ(p.calls[i].name, name);
  EXPECT_EQ(json::parse(p.calls[i].arguments), args) << p.calls[i].arguments;
}

TEST(ToolParsers, HermesOneCall) {
  auto p = parse_both(F::Hermes,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                      "\"days\": 3}}\n</tool_call>");
  EXPECT_FALSE(p.content);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p, 0, "get_weather", {{"city", "Paris"}, {"days", 3}});
  // The model's own text of the arguments.
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\", \"days\": 3}");
}

TEST(ToolParsers, HermesSeveralCallsWithTextAround) {
  const std::string text =
      "Let me look that up.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2, {\"y\": null}]}}\n"
      "</tool_call>\n<tool_call>\n{\"arguments\": {\"s\": \"</tool_call> <tool_call> \\\"q\\\" \\u00e9\"}, "
      "\"name\": \"b\"}\n</tool_call>\nDone.  ";
  auto p = parse_both(F::Hermes, text);
  ASSERT_TRUE(p.content);
  EXPECT_EQ(*p.content, "Let me look that up.Done.  ");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p, 0, "a", {{"x", {1, 2, {{"y", nullptr}}}}});
  expect_call(p, 1, "b", {{"s", "</tool_call> <tool_call> \"q\" \xc3\xa9"}});
}

TEST(ToolParsers, HermesUnclosedLastCallCounts) {
  auto p = parse_both(F::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p, 0, "f", json::object());
  EXPECT_FALSE(p.content);
}

TEST(ToolParsers, HermesArgumentsAsAStringAndMissing) {
  auto p = parse_both(F::Hermes,
                      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>"
                      "<tool_call>{\"name\": \"g\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p, 0, "f", {{"a", 1}});
  expect_call(p, 1, "g", json::object());
}

TEST(ToolParsers, HermesMalformedStaysContent) {
  for (const std::string text : {
           "<tool_call>not json</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>",  // no name
           "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
           "Sure <tool_call>{\"name\" \"f\"}</tool_call> ok",
           "<tool_call>",
           "<tool_",
           "a <tool_cal b",
           "plain text with < and <tool and [TOOL_CALLS] and {\"name\": \"f\"}",
       }) {
    auto p = parse_both(F::Hermes, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    ASSERT_TRUE(p.content) << text;
    EXPECT_EQ(*p.content, text);
  }
}

TEST(ToolParsers, HermesMalformedCallBesideAGoodOne) {
  auto p = parse_both(
      F::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>\n<tool_call>oops</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p, 0, "f", {{"a", 1}});
  ASSERT_TRUE(p.content);
  EXPECT_EQ(*p.content, "<tool_call>oops</tool_call>");
}

TEST(ToolParsers, HermesLateBreakageDiffersOnlyWhenStreamed) {
  // The JSON breaks after the name: the complete parse keeps the text as content; the stream had
  // already announced the call and keeps it.
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1]}</tool_call>";
  auto whole = parse_tool_calls(F::Hermes, text);
  EXPECT_TRUE(whole.calls.empty());
  ASSERT_TRUE(whole.content);
  EXPECT_EQ(*whole.content, text);
  auto s = streamed(F::Hermes, text, 1);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "f");
  // The same for output cut off inside a call.
  EXPECT_TRUE(parse_tool_calls(F::Llama3Json, "{\"name\": \"f\"").calls.empty());
  EXPECT_EQ(streamed(F::Llama3Json, "{\"name\": \"f\"", 2).calls.size(), 1u);
  EXPECT_TRUE(parse_tool_calls(F::Mistral, "[TOOL_CALLS] [{\"name\": \"a\"},]").calls.empty());
}

TEST(ToolParsers, StreamAnnouncesTheCallBeforeItsArgumentsEnd) {
  ToolCallParser p(F::Hermes, true);
  auto e1 = p.feed("Hi <tool_");
  ASSERT_EQ(e1.size(), 1u);
  EXPECT_EQ(e1[0].text, "Hi");  // the space and the marker prefix are held
  auto e2 = p.feed("call>{\"name\": \"get\", \"arguments\": {\"q\": \"a");
  ASSERT_EQ(e2.size(), 2u);
  EXPECT_EQ(e2[0].kind, ToolStreamEvent::Kind::CallBegin);
  EXPECT_EQ(e2[0].text, "get");
  EXPECT_EQ(e2[1].kind, ToolStreamEvent::Kind::Arguments);
  EXPECT_EQ(e2[1].text, "{\"q\": \"a");
  auto e3 = p.feed("bc\"}}</tool_call>");
  ASSERT_EQ(e3.size(), 1u);
  EXPECT_EQ(e3[0].text, "bc\"}");
  EXPECT_TRUE(p.finish().empty());
  EXPECT_EQ(p.calls(), 1);
}

TEST(ToolParsers, PlainTextStreamsAsItComes) {
  ToolCallParser p(F::Hermes, true);
  auto e = p.feed("Once upon a time ");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].text, "Once upon a time");  // the trailing space waits for what follows it
  auto f = p.finish();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].text, " ");
}

TEST(ToolParsers, Llama3Json) {
  auto p = parse_both(F::Llama3Json, "{\"name\": \"search\", \"parameters\": {\"query\": \"cats\"}}");
  EXPECT_FALSE(p.content);
  expect_call(p, 0, "search", {{"query", "cats"}});

  p = parse_both(F::Llama3Json,
                 "<|python_tag|>{\"name\": \"a\", \"arguments\": {\"n\": -1.5e3}}; {\"name\": \"b\", \"parameters\": "
                 "{\"t\": true}}\nThat is all.");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p, 0, "a", {{"n", -1.5e3}});
  expect_call(p, 1, "b", {{"t", true}});
  ASSERT_TRUE(p.content);
  EXPECT_EQ(*p.content, "That is all.");
}

TEST(ToolParsers, Llama3JsonNotACall) {
  for (const std::string text : {"I think {\"name\": \"x\"} is JSON.", "{\"city\": \"Paris\"}", "{\"name\" 1}",
                                 "  {\"name\": [1]}", "<|python_tag", "", "   "}) {
    auto p = parse_both(F::Llama3Json, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content.value_or(""), text);
  }
  // ';' not followed by another call is content.
  auto p = parse_both(F::Llama3Json, " {\"name\": \"f\", \"parameters\": {}} ; and more");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content.value_or(""), "; and more");
}

TEST(ToolParsers, Mistral) {
  auto p = parse_both(F::Mistral,
                      "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"neg\", "
                      "\"arguments\": {\"a\": 0}}]");
  EXPECT_FALSE(p.content);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p, 0, "add", {{"a", 1}, {"b", 2}});
  expect_call(p, 1, "neg", {{"a", 0}});

  p = parse_both(F::Mistral, "Calling: [TOOL_CALLS]{\"name\": \"one\", \"arguments\": {}} thanks");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content.value_or(""), "Calling:thanks");

  for (const std::string text : {"[TOOL_CALLS] [,]", "[TOOL_CALLS] []", "[TOOL_CALLS] nope", "[TOOL_CALL", "[1, 2]"}) {
    p = parse_both(F::Mistral, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content.value_or(""), text);
  }
}

TEST(ToolParsers, RequiredArray) {
  auto p = parse_both(F::Required,
                      " [{\"name\": \"f\", \"parameters\": {\"a\": \"x\"}}, {\"name\": \"g\", \"parameters\": {}}]");
  EXPECT_FALSE(p.content);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p, 0, "f", {{"a", "x"}});
  expect_call(p, 1, "g", json::object());
  // Cut short (max_tokens): the complete parse has no calls, the text stays.
  auto cut = parse_tool_calls(F::Required, "[{\"name\": \"f\", \"parameters\": {\"a\": \"xy");
  EXPECT_TRUE(cut.calls.empty());
}

// finish_reason "length": an array of calls cut short returns the calls it completed, without the
// unfinished tail (issue #32: the whole array used to come back as content with no tool_calls).
TEST(ToolParsers, CutShortKeepsTheCompleteCalls) {
  const std::string two = "[{\"name\": \"f\", \"parameters\": {\"a\": 1}},\n {\"name\": \"g\", \"parameters\": {}}";
  for (const std::string& tail : {std::string(""), std::string(", {\"name\": \"h\", \"parameters\": {\"b\": \"x"),
                                  std::string(",\n {\"na"), std::string(",")}) {
    const std::string text = two + tail;
    auto cut = parse_tool_calls(F::Required, text, "", /*truncated=*/true);
    ASSERT_EQ(cut.calls.size(), 2u) << text;
    expect_call(cut, 0, "f", {{"a", 1}});
    expect_call(cut, 1, "g", json::object());
    EXPECT_FALSE(cut.content) << *cut.content;
    // Not cut short, an unfinished call makes the array content, as before (an array missing only
    // its ']' was already read as its calls).
    if (!tail.empty()) EXPECT_TRUE(parse_tool_calls(F::Required, text).calls.empty()) << text;
  }
  // Mistral's array the same way, content before the marker kept.
  auto m = parse_tool_calls(F::Mistral, "ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\"", "",
                            true);
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].name, "f");
  EXPECT_EQ(m.content.value_or(""), "ok");
  // Hermes: an unfinished region after a complete call is dropped.
  auto h = parse_tool_calls(F::Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>{\"na", "",
                            true);
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_FALSE(h.content) << *h.content;
  // No complete call at all: the text stays content.
  auto none = parse_tool_calls(F::Required, "[{\"name\": \"f\", \"parameters\": {\"a\": \"xy", "", true);
  EXPECT_TRUE(none.calls.empty());
  EXPECT_TRUE(none.content);
}

TEST(ToolParsers, NamedFunction) {
  auto p = parse_both(F::Named, "  {\"city\": \"Paris\"}\n ", "get_weather");
  EXPECT_FALSE(p.content);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}");
  p = parse_both(F::Named, "", "f");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "");
}

TEST(ToolParsers, RandomTextNeverBreaksTheStream) {
  // Pieces of every format shuffled together: whatever the text, the streamed parse equals the
  // complete parse when nothing broke after a name (every call here is whole or has no name).
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "[TOOL_CALLS]",
                                           "<|python_tag|>",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"name\": \"f\"",
                                           "\"arguments\": {}",
                                           ",",
                                           ";",
                                           " ",
                                           "\n",
                                           "text",
                                           "\"",
                                           "\\",
                                           "<",
                                           "[TOOL"};
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const int n = 1 + int(rng() % 12);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    for (F f : {F::Hermes, F::Llama3Json, F::Mistral, F::Required}) {
      auto whole = parse_tool_calls(f, text);
      // Every byte is either content or inside a call: nothing is lost when there are no calls.
      if (whole.calls.empty()) EXPECT_EQ(whole.content.value_or(""), text) << text;
      for (const auto& c : whole.calls) EXPECT_FALSE(json::parse(c.arguments, nullptr, false).is_discarded()) << text;
      // The stream does not depend on how the text is split.
      const auto one = streamed(f, text, 0);
      for (uint32_t seed = 1; seed < 4; ++seed) {
        const auto other = streamed(f, text, seed);
        EXPECT_EQ(other.content, one.content) << text;
        ASSERT_EQ(other.calls.size(), one.calls.size()) << text;
        for (size_t k = 0; k < one.calls.size(); ++k) {
          EXPECT_EQ(other.calls[k].name, one.calls[k].name);
          EXPECT_EQ(other.calls[k].arguments, one.calls[k].arguments);
        }
      }
    }
  }
}

TEST(ToolParsers, NamesAndDetection) {
  EXPECT_EQ(tool_call_format_from_name("hermes"), F::Hermes);
  EXPECT_EQ(tool_call_format_from_name("llama3_json"), F::Llama3Json);
  EXPECT_EQ(tool_call_format_from_name("mistral"), F::Mistral);
  EXPECT_FALSE(tool_call_format_from_name("pythonic"));
  EXPECT_EQ(detect_tool_call_format("... <tool_call>\\n{{ tool_call | tojson }}</tool_call> ..."), F::Hermes);
  EXPECT_EQ(detect_tool_call_format("{{ '[TOOL_CALLS]' }}"), F::Mistral);
  EXPECT_EQ(detect_tool_call_format("<|start_header_id|>ipython<|end_header_id|>"), F::Llama3Json);
  EXPECT_FALSE(detect_tool_call_format("{{ messages }}"));
}

}  // namespace
}  // namespace cypris::server
