// Chat templates: renders a model's Hugging Face chat template (Jinja) for a conversation the way
// transformers' apply_chat_template does, and picks which template a model uses.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace cypris {

namespace jinja {
struct Template;
}

struct ChatTemplateInputs {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // JSON objects keep their key order (ordered_json): templates print tools in input order.
  nlohmann::ordered_json tools;      // null: the template sees `tools` = none
  nlohmann::ordered_json documents;  // null: none
  // More template variables (enable_thinking, reasoning_effort, builtin_tools, ...); a JSON object.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The moment strftime_now() formats; empty: the local time now.
  std::function<std::tm()> clock;
};

class ChatTemplate {
 public:
  // Parses once; throws cypris::Error "chat template: line L, column C: ..." on a syntax error.
  explicit ChatTemplate(std::string source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // messages: a JSON array of {"role", "content", ...}. Throws cypris::Error on a runtime error,
  // a raise_exception() in the template (the message contains the template's text), or when the
  // template runs away (too many steps, too deep recursion, too much output). Thread-safe.
  std::string render(const nlohmann::ordered_json& messages, const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::unique_ptr<jinja::Template> template_;
};

// The ChatML template used when a model has none (resources/chat_templates/chatml.jinja).
std::string chatml_fallback_template();

// Picks the template source for a model, like transformers: `override` (the --chat-template
// flag: a file path, or the template text itself when it contains "{{" or "{%") wins; else with
// tools the template named "tool_use" if there is one; else the one named "default" or the only
// one; else the ChatML fallback. Throws cypris::Error when the override file cannot be read or the
// model has several templates and none is named "default".
std::string select_chat_template(const std::vector<NamedChatTemplate>& templates, bool with_tools,
                                 const std::optional<std::string>& override_template = std::nullopt);

}  // namespace cypris
