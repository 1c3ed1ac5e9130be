#include "app/server/openai/chat_prompt.h"

#include <fmt/format.h>

#include "app/server/errors.h"

namespace cypris::server {

using nlohmann::json;

std::string message_text(const json& content, size_t i) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string out;
    for (const auto& part : content) {
      if (!part.is_object()) {
        throw HttpError(400, fmt::format("'messages[{}].content' parts must be objects", i), "messages");
      }
      const std::string type = part.value("type", std::string("text"));
      if (type != "text") {
        throw HttpError(400, fmt::format("'messages[{}].content': part type \"{}\" is not supported (text only)", i,
                                         type), "messages");
      }
      auto t = part.find("text");
      if (t == part.end() || !t->is_string()) {
        throw HttpError(400, fmt::format("'messages[{}].content' text parts need a string \"text\"", i), "messages");
      }
      out += t->get<std::string>();
    }
    return out;
  }
  throw HttpError(400, fmt::format("'messages[{}].content' must be a string or a list of parts", i), "messages");
}

static void check_messages(const json& messages) {
  if (!messages.is_array() || messages.empty()) {
    throw HttpError(400, "'messages' must be a non-empty list of {role, content} objects", "messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object()) throw HttpError(400, fmt::format("'messages[{}]' must be an object", i), "messages");
    auto r = m.find("role");
    if (r == m.end() || !r->is_string()) {
      throw HttpError(400, fmt::format("'messages[{}].role' must be a string", i), "messages");
    }
    if (m.contains("content")) message_text(m["content"], i);
  }
}

std::string render_chat_prompt(const json& messages, const Tokenizer* tok, const ChatPromptInputs& in) {
  check_messages(messages);
  (void)tok;
  // ChatML, the fallback for models without a template.
  // TODO(jinja): render the Jinja chat template (request, --chat-template, tokenizer) once
  // engine/tokenizer/chat_template.h lands.
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    out += "<|im_start|>" + m["role"].get<std::string>() + "\n";
    out += m.contains("content") ? message_text(m["content"], i) : "";
    out += "<|im_end|>\n";
  }
  if (in.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace cypris::server
