// Tool calling on /v1/chat/completions, the request side: reads and checks `tools`, `tool_choice`
// and `parallel_tool_calls`, builds the grammar that enforces tool_choice "required" and a named
// function (through engine/guided's JSON-schema compiler, as vLLM does), and says how the output
// is to be read (tool_parsers.h). Also the response side's tool_calls JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/server/openai/tool_parsers.h"
#include "engine/config/engine_config.h"
#include "engine/request/sampling_params.h"

namespace cypris::server {

struct ChatTools {
  enum class Choice { None, Auto, Required, Named };
  Choice choice = Choice::None;
  bool explicit_choice = false;    // the request named a tool_choice
  std::string named;               // Choice::Named: the function
  bool parallel = true;            // parallel_tool_calls
  nlohmann::ordered_json tools;    // the request's tools as sent (null: none), for the chat template
  std::vector<std::string> names;  // the tools' function names, in order

  bool any() const { return !names.empty(); }
};

// Reads tools / tool_choice / parallel_tool_calls from the body (client key order); HttpError 400
// naming the field for anything wrong: tools not an array, a tool that is not {"type": "function",
// "function": {"name", "description"?, "parameters"?}}, parameters that are not an object schema,
// a duplicate name, a tool_choice that is not "none" / "auto" / "required" / {"type": "function",
// "function": {"name"}}, one naming a function not in tools, "required" or a name without tools,
// "auto" without --enable-auto-tool-choice. With tools and no tool_choice: "auto" when the server
// has --enable-auto-tool-choice, else "none" (the tools still reach the chat template).
ChatTools tools_from_json(const nlohmann::ordered_json& body, const ServerOptions& opts);

// The grammar for tool_choice "required" (a JSON array of one or more {"name": <a tool>,
// "parameters": <its schema>}; exactly one when parallel_tool_calls is false) or a named function
// (its parameters schema); inactive otherwise. Compiled here: a schema the grammar engine refuses is
// HttpError 400 naming "tools". whitespace_pattern: the request's guided_whitespace_pattern.
GuidedDecodingParams tool_guided_params(const ChatTools& t, std::optional<std::string> whitespace_pattern = {},
                                        bool compile = true);

// How the output is read: Required / Named for those choices; for "auto" --tool-call-parser, else
// the format the chat template's text shows (logged once per template; HttpError 400 when it shows
// none); nullopt for "none".
std::optional<ToolCallFormat> tool_output_format(const ChatTools& t, const ServerOptions& opts,
                                                 const std::string& chat_template_source);

// {"id": "chatcmpl-tool-<32 hex>", "type": "function", "function": {"name", "arguments"}}
nlohmann::json tool_call_json(const std::string& id, const std::string& name, const std::string& arguments);
std::string new_tool_call_id();

// Assistant messages' tool_calls[].function.arguments arrive as JSON strings (OpenAI's format);
// chat templates expect objects, so they are parsed, as vLLM does (a string that is not JSON is left
// as it is). Returns the messages with that done.
nlohmann::ordered_json tool_call_arguments_as_objects(const nlohmann::ordered_json& messages);

}  // namespace cypris::server
