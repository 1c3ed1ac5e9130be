#include "app/server/openai/chat_tools.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "app/server/context.h"
#include "app/server/errors.h"
#include "engine/common/error.h"
#include "engine/common/log.h"
#include "engine/guided/guided_decoding.h"

namespace cypris::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& msg) {
  throw HttpError(400, msg, field);
}

// A tool's parameters as the grammar's schema: none means an object without properties.
json parameters_schema(const ordered_json& tool) {
  const auto& fn = tool["function"];
  auto it = fn.find("parameters");
  if (it == fn.end() || it->is_null()) return json{{"type", "object"}, {"properties", json::object()}};
  return json::parse(it->dump());
}

}  // namespace

ChatTools tools_from_json(const ordered_json& body, const ServerOptions& opts) {
  ChatTools t;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) bad("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    std::set<std::string> seen;
    for (size_t i = 0; i < it->size(); ++i) {
      const ordered_json& tool = (*it)[i];
      const std::string where = fmt::format("'tools[{}]'", i);
      if (!tool.is_object()) bad("tools", where + " must be an object");
      if (auto ty = tool.find("type"); ty != tool.end() && !(ty->is_string() && *ty == "function")) {
        bad("tools", where + ".type must be \"function\" (the only tool type)");
      }
      auto fn = tool.find("function");
      if (fn == tool.end() || !fn->is_object()) bad("tools", where + ".function must be an object");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
        bad("tools", where + ".function.name must be a non-empty string");
      }
      if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string()) {
        bad("tools", where + ".function.description must be a string");
      }
      if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
        if (!p->is_object()) bad("tools", where + ".function.parameters must be a JSON Schema object");
        if (auto ty = p->find("type"); ty != p->end() && !(ty->is_string() && *ty == "object")) {
          bad("tools",
              where + ".function.parameters must describe an object (\"type\": \"object\"), got " + ty->dump());
        }
      }
      const std::string n = name->get<std::string>();
      if (!seen.insert(n).second) bad("tools", fmt::format("{}: the function name \"{}\" is used twice", where, n));
      t.names.push_back(n);
    }
    if (!it->empty()) t.tools = *it;
  }

  if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    t.parallel = it->get<bool>();
  }

  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) {
    // OpenAI's default with tools is "auto"; vLLM refuses that without --enable-auto-tool-choice.
    // Here the tools still reach the template and the output comes back as text.
    if (t.any() && opts.enable_auto_tool_choice) t.choice = ChatTools::Choice::Auto;
    return t;
  }
  t.explicit_choice = true;
  if (it->is_string()) {
    const std::string s = it->get<std::string>();
    if (s == "none") {
      t.choice = ChatTools::Choice::None;
    } else if (s == "auto") {
      t.choice = ChatTools::Choice::Auto;
    } else if (s == "required") {
      t.choice = ChatTools::Choice::Required;
    } else {
      bad("tool_choice", fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": "
                                     "\"function\", \"function\": {{\"name\": ...}}}}, got \"{}\"",
                                     s));
    }
  } else if (it->is_object()) {
    if (auto ty = it->find("type"); ty == it->end() || !(ty->is_string() && *ty == "function")) {
      bad("tool_choice", "'tool_choice.type' must be \"function\"");
    }
    auto fn = it->find("function");
    if (fn == it->end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      bad("tool_choice", "'tool_choice.function.name' must be a string");
    }
    t.choice = ChatTools::Choice::Named;
    t.named = (*fn)["name"].get<std::string>();
  } else {
    bad("tool_choice", "'tool_choice' must be a string or an object");
  }

  if (t.choice != ChatTools::Choice::None && !t.any()) {
    bad("tool_choice", "'tool_choice' other than \"none\" needs 'tools' (a non-empty array)");
  }
  if (t.choice == ChatTools::Choice::Named && std::find(t.names.begin(), t.names.end(), t.named) == t.names.end()) {
    bad("tool_choice", fmt::format("'tool_choice' names the function \"{}\", which is not in 'tools'", t.named));
  }
  if (t.choice == ChatTools::Choice::Auto && !opts.enable_auto_tool_choice) {
    bad("tool_choice",
        "'tool_choice' \"auto\" needs the server to run with --enable-auto-tool-choice (and --tool-call-parser, or "
        "a chat template that shows the tool-call format)");
  }
  return t;
}

GuidedDecodingParams tool_guided_params(const ChatTools& t, std::optional<std::string> whitespace_pattern,
                                        bool compile) {
  GuidedDecodingParams g;
  if (t.choice != ChatTools::Choice::Required && t.choice != ChatTools::Choice::Named) return g;
  g.kind = GuidedKind::JsonSchema;
  g.whitespace_pattern = std::move(whitespace_pattern);
  if (t.choice == ChatTools::Choice::Named) {
    for (const auto& tool : t.tools) {
      if (tool["function"]["name"] == t.named) g.text = parameters_schema(tool).dump();
    }
  } else {
    // vLLM's schema: an array of {"name": <one tool>, "parameters": <its schema>}. Each tool's $defs
    // go to the root, where its "#/$defs/..." references look for them.
    json any_of = json::array();
    json defs = {{"$defs", json::object()}, {"definitions", json::object()}};
    for (const auto& tool : t.tools) {
      json params = parameters_schema(tool);
      for (const char* key : {"$defs", "definitions"}) {
        auto d = params.find(key);
        if (d == params.end()) continue;
        if (!d->is_object()) bad("tools", fmt::format("a tool's parameters.{} must be an object", key));
        json& slot = defs[key];
        for (auto& [name, schema] : d->items()) {
          if (slot.contains(name) && slot[name] != schema) {
            bad("tools", fmt::format("two tools define \"{}\" in their {} differently; tool_choice \"required\" "
                                     "needs them to agree",
                                     name, key));
          }
          slot[name] = schema;
        }
      }
      const std::string name = tool["function"]["name"].get<std::string>();
      any_of.push_back({{"type", "object"},
                        {"properties", {{"name", {{"type", "string"}, {"enum", {name}}}}, {"parameters", params}}},
                        {"required", {"name", "parameters"}},
                        {"additionalProperties", false}});
    }
    json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
    if (!t.parallel) schema["maxItems"] = 1;
    for (const char* key : {"$defs", "definitions"}) {
      if (!defs[key].empty()) schema[key] = defs[key];
    }
    g.text = schema.dump();
  }
  if (!compile) return g;
  try {
    guided::compile(g);
  } catch (const Error& e) {
    const std::string which = t.choice == ChatTools::Choice::Named ? fmt::format("the parameters of \"{}\"", t.named)
                                                                   : "the tools' parameters";
    throw HttpError(400, fmt::format("'tools': {} cannot be enforced for tool_choice: {}", which, e.what()), "tools");
  }
  return g;
}

std::optional<ToolCallFormat> tool_output_format(const ChatTools& t, const ServerOptions& opts,
                                                 const std::string& chat_template_source) {
  switch (t.choice) {
    case ChatTools::Choice::None:
      return std::nullopt;
    case ChatTools::Choice::Required:
      return ToolCallFormat::Required;
    case ChatTools::Choice::Named:
      return ToolCallFormat::Named;
    case ChatTools::Choice::Auto:
      break;
  }
  if (opts.tool_call_parser) {
    auto f = tool_call_format_from_name(*opts.tool_call_parser);
    if (f) return f;
    throw HttpError(500, fmt::format("--tool-call-parser {} is not a parser this server has", *opts.tool_call_parser));
  }
  auto f = detect_tool_call_format(chat_template_source);
  static std::mutex mu;
  static std::set<size_t> logged;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (logged.insert(std::hash<std::string>()(chat_template_source)).second) {
      if (f) {
        LOG_INFO(
            "tool calls: no --tool-call-parser; the chat template shows the {} format, so its parser reads the "
            "output",
            tool_call_format_name(*f));
      } else {
        LOG_WARN(
            "tool calls: no --tool-call-parser and the chat template shows no known tool-call format; "
            "tool_choice \"auto\" requests are refused");
      }
    }
  }
  if (!f) {
    if (!t.explicit_choice) return std::nullopt;  // tools sent without asking for auto: plain text
    throw HttpError(400,
                    "'tool_choice' \"auto\": the chat template shows no tool-call format this server can read; start "
                    "it with --tool-call-parser (hermes, llama3_json or mistral)",
                    "tool_choice");
  }
  return f;
}

std::string new_tool_call_id() {
  return "chatcmpl-tool-" + random_genkey();
}

json tool_call_json(const std::string& id, const std::string& name, const std::string& arguments) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

ordered_json tool_call_arguments_as_objects(const ordered_json& messages) {
  ordered_json out = messages;
  if (!out.is_array()) return out;
  for (auto& m : out) {
    if (!m.is_object()) continue;
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (auto& c : *calls) {
      if (!c.is_object()) continue;
      auto fn = c.find("function");
      if (fn == c.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string()) continue;
      ordered_json parsed = ordered_json::parse(args->get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) *args = std::move(parsed);
    }
  }
  return out;
}

}  // namespace cypris::server
