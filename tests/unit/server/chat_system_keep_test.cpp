// --context-shift on the chat route: the kept prefix is the rendered system prompt
// (system_prompt_tokens in app/server/openai/chat_prompt.h). With one token per byte, the count must
// be the length of the system part as the template writes it, written out here by hand for ChatML
// and found in the real Qwen 2.5 and Llama 3.1 templates' output.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/server/openai/chat_prompt.h"

namespace cypris::server {
namespace {

using nlohmann::ordered_json;

std::vector<int32_t> bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

std::string template_text(const std::string& name) {
  std::ifstream in(std::string(CYPRIS_TESTDATA_DIR) + "/chat_templates/" + name);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

std::optional<int> keep_of(const ordered_json& messages, const std::string& tmpl) {
  ChatPromptInputs in;
  in.template_override = tmpl;
  const std::vector<int32_t> prompt = bytes(render_chat_prompt(messages, nullptr, in));
  return system_prompt_tokens(messages, nullptr, in, prompt, bytes);
}

TEST(ChatSystemKeep, TheSystemMessagesAsRenderedAreKept) {
  const ordered_json chat = ordered_json::parse(R"([
    {"role": "system", "content": "You are a pirate."},
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Arr."},
    {"role": "user", "content": "Where is the gold?"}])");
  const std::string system = "<|im_start|>system\nYou are a pirate.<|im_end|>\n<|im_start|>system\nAnswer briefly.<|im_end|>\n";
  EXPECT_EQ(keep_of(chat, kChatMl), int(system.size()));

  // Real templates: the count ends where the first user turn begins.
  for (const char* name : {"Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"}) {
    SCOPED_TRACE(name);
    ChatPromptInputs in;
    in.template_override = template_text(name);
    const std::string full = render_chat_prompt(chat, nullptr, in);
    const auto keep = keep_of(chat, in.template_override);
    ASSERT_TRUE(keep.has_value());
    const std::string kept = full.substr(0, size_t(*keep));
    EXPECT_NE(kept.find("Answer briefly."), std::string::npos) << kept;
    EXPECT_EQ(kept.find("Hello"), std::string::npos) << kept;
    EXPECT_NE(full.substr(size_t(*keep)).find("Hello"), std::string::npos);
  }
}

TEST(ChatSystemKeep, NothingWithoutALeadingSystemMessage) {
  const ordered_json chat = ordered_json::parse(R"([
    {"role": "user", "content": "Hello"},
    {"role": "system", "content": "Late system message."}])");
  EXPECT_FALSE(keep_of(chat, kChatMl).has_value());
  // A template that refuses to render the system part alone: the default rule applies.
  const char* strict = "{% if messages[-1].role != 'user' %}{{ raise_exception('must end with user') }}{% endif %}"
                       "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}";
  const ordered_json sys_first = ordered_json::parse(R"([
    {"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  EXPECT_FALSE(keep_of(sys_first, strict).has_value());
}

}  // namespace
}  // namespace cypris::server
