// The request side of tool calls (app/server/openai/chat_tools.h): tools in real chat templates
// (tool calls and tool results round-trip), the tool_choice grammars, and which parser "auto" uses.
#include "app/server/openai/chat_tools.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "app/server/errors.h"
#include "app/server/openai/chat_prompt.h"

namespace cypris::server {
namespace {

using nlohmann::ordered_json;

std::string template_text(const std::string& name) {
  std::ifstream in(std::string(CYPRIS_TESTDATA_DIR) + "/chat_templates/" + name);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const ordered_json kTools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "The weather in a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
  "required": ["city"]}}}])");

// A conversation where the assistant called a tool (arguments as OpenAI sends them: a JSON string)
// and the tool answered.
const ordered_json kConversation = ordered_json::parse(R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "abcDEF123", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
  {"role": "tool", "tool_call_id": "abcDEF123", "content": "Sunny, 24 C"}
])");

std::string render(const std::string& tmpl) {
  ChatPromptInputs in;
  in.template_override = template_text(tmpl);
  in.tools = kTools;
  std::string used;
  std::string out = render_chat_prompt(kConversation, nullptr, in, &used);
  EXPECT_EQ(used, in.template_override);
  return out;
}

TEST(ChatTools, ToolCallsAndResultsRenderInToolTemplates) {
  struct Case {
    const char* tmpl;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja",
       {"<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_response>\nSunny, 24 C\n</tool_response>"}},
      {"Qwen-Qwen3-0.6B.jinja",
       {"\"arguments\": {\"city\": \"Paris\"}", "<tool_response>\nSunny, 24 C\n</tool_response>"}},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
       {"<tools> {\"type\": \"function\", \"function\": {\"name\": \"get_weather\"",
        "\"arguments\": {\"city\": \"Paris\"}", "Sunny, 24 C"}},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja",
       {"\"name\": \"get_weather\"", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"Sunny, 24 C\""}},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja",
       {"[AVAILABLE_TOOLS]", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}",
        "[TOOL_RESULTS]{\"content\": Sunny, 24 C, \"call_id\": \"abcDEF123\"}"}},
  };
  for (const auto& c : cases) {
    const std::string out = render(c.tmpl);
    for (const auto& w : c.want) EXPECT_NE(out.find(w), std::string::npos) << c.tmpl << ": no " << w << " in\n" << out;
  }
}

TEST(ChatTools, ArgumentsThatAreNotJsonStayText) {
  ordered_json m = ordered_json::parse(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f",
    "arguments": "not json"}}, {"function": {"name": "g", "arguments": "{\"a\": [1]}"}}]}])");
  ordered_json out = tool_call_arguments_as_objects(m);
  EXPECT_EQ(out[0]["tool_calls"][0]["function"]["arguments"], "not json");
  EXPECT_EQ(out[0]["tool_calls"][1]["function"]["arguments"], ordered_json::parse(R"({"a": [1]})"));
}

ChatTools tools_with(const char* choice_json, bool auto_flag = true) {
  ServerOptions o;
  o.enable_auto_tool_choice = auto_flag;
  ordered_json body = {{"tools", kTools}};
  if (choice_json) body["tool_choice"] = ordered_json::parse(choice_json);
  return tools_from_json(body, o);
}

TEST(ChatTools, AutoUsesTheFlagOrTheTemplate) {
  ServerOptions o;
  o.enable_auto_tool_choice = true;
  const ChatTools t = tools_with("\"auto\"");
  EXPECT_EQ(tool_output_format(t, o, template_text("Qwen-Qwen2.5-7B-Instruct.jinja")), ToolCallFormat::Hermes);
  EXPECT_EQ(tool_output_format(t, o, template_text("meta-llama-Llama-3.1-8B-Instruct.jinja")),
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(tool_output_format(t, o, template_text("mistralai-Mistral-Nemo-Instruct-2407.jinja")),
            ToolCallFormat::Mistral);
  o.tool_call_parser = "mistral";
  EXPECT_EQ(tool_output_format(t, o, template_text("Qwen-Qwen2.5-7B-Instruct.jinja")), ToolCallFormat::Mistral);
  o.tool_call_parser.reset();
  // A template that shows no format: an explicit "auto" is refused, tools alone give text.
  EXPECT_THROW(tool_output_format(t, o, "{{ messages }}"), HttpError);
  EXPECT_EQ(tool_output_format(tools_with(nullptr), o, "{{ messages }}"), std::nullopt);
  // Without --enable-auto-tool-choice, tools alone are "none".
  EXPECT_EQ(tools_with(nullptr, false).choice, ChatTools::Choice::None);
  EXPECT_EQ(tools_with(nullptr, true).choice, ChatTools::Choice::Auto);
  EXPECT_EQ(tool_output_format(tools_with("\"required\""), o, ""), ToolCallFormat::Required);
  EXPECT_EQ(tool_output_format(tools_with(R"({"type": "function", "function": {"name": "get_weather"}})"), o, ""),
            ToolCallFormat::Named);
}

TEST(ChatTools, GrammarsForRequiredAndNamed) {
  EXPECT_FALSE(tool_guided_params(tools_with("\"none\"")).active());
  const GuidedDecodingParams named =
      tool_guided_params(tools_with(R"({"type": "function", "function": {"name": "get_weather"}})"));
  ASSERT_EQ(named.kind, GuidedKind::JsonSchema);
  EXPECT_EQ(nlohmann::json::parse(named.text), nlohmann::json::parse(kTools[0]["function"]["parameters"].dump()));
  const GuidedDecodingParams req = tool_guided_params(tools_with("\"required\""));
  const nlohmann::json s = nlohmann::json::parse(req.text);
  EXPECT_EQ(s["type"], "array");
  EXPECT_EQ(s["minItems"], 1);
  EXPECT_FALSE(s.contains("maxItems"));
  EXPECT_EQ(s["items"]["anyOf"][0]["properties"]["name"]["enum"][0], "get_weather");
  // parallel_tool_calls false: one call.
  ServerOptions o;
  ordered_json body = {{"tools", kTools}, {"tool_choice", "required"}, {"parallel_tool_calls", false}};
  EXPECT_EQ(nlohmann::json::parse(tool_guided_params(tools_from_json(body, o)).text)["maxItems"], 1);
}

}  // namespace
}  // namespace cypris::server
