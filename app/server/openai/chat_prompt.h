// Renders chat messages into the prompt text for /v1/chat/completions and /v1/tokenize.
// Template choice: the request's chat_template, else --chat-template, else the tokenizer's
// default template; a model without one gets ChatML.
#pragma once

#include <nlohmann/json.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace cypris::server {

struct ChatPromptInputs {
  bool add_generation_prompt = true;
  std::string template_override;     // the request's chat_template ("" = none)
  std::string server_template;       // --chat-template: a file or the template text ("" = none)
  nlohmann::ordered_json tools;      // null = none
  nlohmann::ordered_json documents;  // null = none
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
};

// Checks the messages (HttpError 400 naming messages[i]) and renders them; a template that fails
// (raise_exception, runaway) is HttpError 400 with the template's message. Messages are
// ordered_json so templates print keys in the client's order. Assistant tool_calls arguments sent
// as JSON strings reach the template as objects (vLLM does the same). used_source: the template
// text that was rendered (the tool-call format is read from it).
std::string render_chat_prompt(const nlohmann::ordered_json& messages, const Tokenizer* tok, const ChatPromptInputs& in,
                               std::string* used_source = nullptr);

// --context-shift: how many leading tokens of `prompt_ids` (the tokens of the whole rendered chat)
// are the system prompt: the leading "system" messages rendered alone, without a generation prompt,
// encoded by `encode`, and matched token by token against prompt_ids (a template that closes the
// system part differently when nothing follows loses only the tokens that differ). nullopt when the
// chat does not start with a system message or the template refuses to render it alone.
std::optional<int> system_prompt_tokens(const nlohmann::ordered_json& messages, const Tokenizer* tok,
                                        const ChatPromptInputs& in, const std::vector<int32_t>& prompt_ids,
                                        const std::function<std::vector<int32_t>(const std::string&)>& encode);

// Parses the model's chat templates and --chat-template once, logging a warning for each that
// cannot be parsed (chat requests would answer 500): called when a model is loaded.
void warn_about_broken_chat_templates(const Tokenizer* tok, const std::string& server_template);

// The text of a message's content: a string, or the "text" parts of a list of parts.
std::string message_text(const nlohmann::json& content, size_t index);

}  // namespace cypris::server
