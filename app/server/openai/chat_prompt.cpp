#include "app/server/openai/chat_prompt.h"

#include <fmt/format.h>

#include <list>
#include <mutex>

#include "app/server/errors.h"
#include "app/server/openai/chat_tools.h"
#include "engine/chat/chat_template.h"
#include "engine/common/error.h"
#include "engine/common/log.h"

namespace cypris::server {

using nlohmann::json;
using nlohmann::ordered_json;

template <typename J>
static std::string content_text(const J& content, size_t i) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.template get<std::string>();
  if (content.is_array()) {
    std::string out;
    for (const auto& part : content) {
      if (!part.is_object()) {
        throw HttpError(400, fmt::format("'messages[{}].content' parts must be objects", i), "messages");
      }
      const std::string type = part.value("type", std::string("text"));
      if (type != "text") {
        throw HttpError(400,
                        fmt::format("'messages[{}].content': part type \"{}\" is not supported (text only)", i, type),
                        "messages");
      }
      auto t = part.find("text");
      if (t == part.end() || !t->is_string()) {
        throw HttpError(400, fmt::format("'messages[{}].content' text parts need a string \"text\"", i), "messages");
      }
      out += t->template get<std::string>();
    }
    return out;
  }
  throw HttpError(400, fmt::format("'messages[{}].content' must be a string or a list of parts", i), "messages");
}

std::string message_text(const json& content, size_t i) {
  return content_text(content, i);
}

// Text parts become plain strings: most templates expect content to be a string.
static ordered_json normalize_messages(const ordered_json& messages) {
  if (!messages.is_array() || messages.empty()) {
    throw HttpError(400, "'messages' must be a non-empty list of {role, content} objects", "messages");
  }
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    if (!m.is_object()) throw HttpError(400, fmt::format("'messages[{}]' must be an object", i), "messages");
    auto r = m.find("role");
    if (r == m.end() || !r->is_string()) {
      throw HttpError(400, fmt::format("'messages[{}].role' must be a string", i), "messages");
    }
    ordered_json copy = m;
    if (m.contains("content") && m["content"].is_array()) copy["content"] = content_text(m["content"], i);
    if (m.contains("content")) content_text(m["content"], i);  // type check
    // An assistant turn that only calls tools comes with "content": null; templates test it with
    // `in` or `+` (Qwen3, Hermes), so it becomes "" as vLLM makes it.
    if (m.contains("tool_calls") && (!m.contains("content") || m["content"].is_null())) copy["content"] = "";
    out.push_back(std::move(copy));
  }
  return out;
}

// Parsed templates by source: parsing once per request would cost more than rendering.
static std::shared_ptr<const ChatTemplate> parsed_template(const std::string& source) {
  static std::mutex mu;
  static std::list<std::pair<std::string, std::shared_ptr<const ChatTemplate>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = cache.begin(); it != cache.end(); ++it) {
    if (it->first == source) {
      cache.splice(cache.begin(), cache, it);
      return cache.front().second;
    }
  }
  auto t = std::make_shared<const ChatTemplate>(source);
  cache.emplace_front(source, t);
  if (cache.size() > 8) cache.pop_back();
  return t;
}

std::string render_chat_prompt(const ordered_json& messages, const Tokenizer* tok, const ChatPromptInputs& in,
                               std::string* used_source) {
  const ordered_json msgs = tool_call_arguments_as_objects(normalize_messages(messages));
  const bool with_tools = in.tools.is_array() && !in.tools.empty();
  std::string source;
  try {
    if (!in.template_override.empty()) {
      source = in.template_override;
    } else {
      static const std::vector<NamedChatTemplate> kNone;
      std::optional<std::string> server;
      if (!in.server_template.empty()) server = in.server_template;
      source = select_chat_template(tok ? tok->chat_templates() : kNone, with_tools, server);
    }
  } catch (const cypris::Error& e) {
    throw HttpError(500, std::string("chat template: ") + e.what());
  }
  if (used_source) *used_source = source;
  ChatTemplateInputs ti;
  ti.add_generation_prompt = in.add_generation_prompt;
  if (tok) {
    ti.bos_token = tok->bos_token();
    ti.eos_token = tok->eos_token();
  }
  if (with_tools) ti.tools = in.tools;
  if (!in.documents.is_null()) ti.documents = in.documents;
  if (in.template_kwargs.is_object()) ti.extra = in.template_kwargs;
  std::shared_ptr<const ChatTemplate> tmpl;
  try {
    tmpl = parsed_template(source);
  } catch (const cypris::Error& e) {
    // A template the client sent is the client's fault; the server's or the model's own is not.
    if (!in.template_override.empty()) throw HttpError(400, std::string("chat template: ") + e.what(), "chat_template");
    throw HttpError(500, std::string(in.server_template.empty() ? "the model's chat template (tokenizer_config.json)"
                                                                : "the server's --chat-template") +
                             " cannot be parsed: " + e.what());
  }
  try {
    return tmpl->render(msgs, ti);
  } catch (const cypris::Error& e) {
    throw HttpError(400, std::string("chat template: ") + e.what(),
                    in.template_override.empty() ? std::optional<std::string>("messages") : "chat_template");
  }
}

std::optional<int> system_prompt_tokens(const ordered_json& messages, const Tokenizer* tok, const ChatPromptInputs& in,
                                        const std::vector<int32_t>& prompt_ids,
                                        const std::function<std::vector<int32_t>(const std::string&)>& encode) {
  if (!messages.is_array()) return std::nullopt;
  ordered_json system = ordered_json::array();
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || m["role"] != "system") break;
    system.push_back(m);
  }
  if (system.empty()) return std::nullopt;
  ChatPromptInputs alone = in;
  alone.add_generation_prompt = false;
  std::vector<int32_t> ids;
  try {
    ids = encode(render_chat_prompt(system, tok, alone));
  } catch (const std::exception&) {
    return std::nullopt;  // e.g. a template that insists on a user message
  }
  size_t n = 0;
  while (n < ids.size() && n < prompt_ids.size() && ids[n] == prompt_ids[n]) ++n;
  if (n == 0) return std::nullopt;
  return static_cast<int>(n);
}

void warn_about_broken_chat_templates(const Tokenizer* tok, const std::string& server_template) {
  std::vector<NamedChatTemplate> all;
  if (tok) all = tok->chat_templates();
  if (!server_template.empty()) {
    try {
      all.push_back({"--chat-template", select_chat_template({}, false, server_template)});
    } catch (const cypris::Error& e) {
      LOG_WARN("--chat-template cannot be read: {}; /v1/chat/completions will answer 500", e.what());
    }
  }
  for (const auto& t : all) {
    try {
      parsed_template(t.source);
    } catch (const cypris::Error& e) {
      LOG_WARN("chat template '{}' cannot be parsed: {}; chat requests that use it will answer 500", t.name, e.what());
    }
  }
}

}  // namespace cypris::server
