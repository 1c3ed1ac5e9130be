// The user-facing chat template API: template selection (default / only / tool_use / override /
// ChatML fallback), the ChatML fallback's output, input key order, and concurrent rendering.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/chat/chat_template.h"
#include "engine/common/error.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

const nlohmann::ordered_json kConversation =
    nlohmann::ordered_json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");

TEST(ChatTemplateApi, ChatMLFallbackRendersConversation) {
  ChatTemplate tmpl(chatml_fallback_template());
  ChatTemplateInputs in;
  EXPECT_EQ(tmpl.render(kConversation, in),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  in.add_generation_prompt = false;
  auto parts = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(tmpl.render(parts, in), "<|im_start|>user\nab<|im_end|>\n");
}

TEST(ChatTemplateApi, SelectsLikeTransformers) {
  std::vector<NamedChatTemplate> one = {{"default", "D"}};
  std::vector<NamedChatTemplate> named = {{"default", "D"}, {"tool_use", "T"}, {"rag", "R"}};
  std::vector<NamedChatTemplate> only = {{"something", "S"}};
  EXPECT_EQ(select_chat_template(one, false), "D");
  EXPECT_EQ(select_chat_template(one, true), "D");
  EXPECT_EQ(select_chat_template(named, false), "D");
  EXPECT_EQ(select_chat_template(named, true), "T");
  EXPECT_EQ(select_chat_template(only, true), "S");
  EXPECT_EQ(select_chat_template({}, false), chatml_fallback_template());
  std::vector<NamedChatTemplate> ambiguous = {{"a", "A"}, {"b", "B"}};
  try {
    select_chat_template(ambiguous, false);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("a, b"));
  }
}

TEST(ChatTemplateApi, OverrideIsAFileOrTemplateText) {
  std::vector<NamedChatTemplate> one = {{"default", "D"}};
  auto path = std::filesystem::temp_directory_path() / "cypris_chat_template_override_test.jinja";
  std::ofstream(path) << "{{ messages[0].content }}";
  EXPECT_EQ(select_chat_template(one, false, path.string()), "{{ messages[0].content }}");
  std::filesystem::remove(path);
  EXPECT_EQ(select_chat_template(one, false, "{% for m in messages %}{% endfor %}"),
            "{% for m in messages %}{% endfor %}");
  EXPECT_THROW(select_chat_template(one, false, "/nonexistent/template.jinja"), Error);
  EXPECT_EQ(select_chat_template(one, false, std::nullopt), "D");
}

TEST(ChatTemplateApi, KeepsKeyOrderOfInputs) {
  ChatTemplate tmpl("{{ tools|tojson }}|{{ messages[0]|tojson }}|{{ documents }}|{{ enable_thinking }}");
  ChatTemplateInputs in;
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  in.extra = {{"enable_thinking", false}};
  auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x", "aaa": 1}])");
  EXPECT_EQ(
      tmpl.render(msgs, in),
      R"([{"type": "function", "function": {"name": "f"}}]|{"role": "user", "content": "x", "aaa": 1}|None|False)");
}

TEST(ChatTemplateApi, RejectsBadArguments) {
  ChatTemplate tmpl("x");
  EXPECT_THROW(tmpl.render(nlohmann::ordered_json::object(), {}), Error);
  ChatTemplateInputs in;
  in.extra = 3;
  EXPECT_THROW(tmpl.render(nlohmann::ordered_json::array(), in), Error);
  EXPECT_THROW(ChatTemplate("{% if %}"), Error);
}

TEST(ChatTemplateApi, RendersConcurrently) {
  ChatTemplate tmpl(chatml_fallback_template());
  const std::string expected = tmpl.render(kConversation, {});
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (tmpl.render(kConversation, {}) != expected) ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace cypris
