// The chat transcript: streaming a reply, stop, edit, delete, regenerate, what the template gets.
#include "app/ui/state/chat_transcript.h"

#include <gtest/gtest.h>

namespace cypris {
namespace {

std::vector<std::string> roles(const std::vector<ChatTemplateMessage>& m) {
  std::vector<std::string> r;
  for (const auto& x : m) r.push_back(x.role + ":" + x.content);
  return r;
}

TEST(ChatTranscript, StreamsAReplyWithTokenCountsAndRate) {
  ChatTranscript t;
  t.system_prompt = "Be brief.";
  ASSERT_TRUE(t.add_user("Hi"));
  auto idx = t.begin_reply(10.0);
  ASSERT_TRUE(idx.has_value());
  EXPECT_TRUE(t.generating());
  // While streaming the template does not see the partial reply.
  EXPECT_EQ(roles(t.template_messages()), (std::vector<std::string>{"system:Be brief.", "user:Hi"}));
  t.set_prompt_tokens(7);
  t.append_reply("Hel", 1, 10.5);
  t.append_reply("lo", 1, 11.0);
  t.finish_reply("stop", 12.0);
  EXPECT_FALSE(t.generating());
  const auto& m = t.messages()[*idx];
  EXPECT_EQ(m.content, "Hello");
  EXPECT_EQ(m.generated_tokens, 2);
  EXPECT_EQ(m.prompt_tokens, 7);
  EXPECT_DOUBLE_EQ(m.tokens_per_s(), 1.0);  // 2 tokens over 2 s
  EXPECT_DOUBLE_EQ(m.time_to_first_token(), 0.5);
  EXPECT_EQ(roles(t.template_messages()), (std::vector<std::string>{"system:Be brief.", "user:Hi", "assistant:Hello"}));
}

TEST(ChatTranscript, NoSecondReplyWhileStreamingAndNoEmptyMessages) {
  ChatTranscript t;
  EXPECT_FALSE(t.add_user("  \n"));
  EXPECT_FALSE(t.begin_reply(0).has_value());  // nothing to answer
  t.add_user("a");
  t.begin_reply(0);
  EXPECT_FALSE(t.add_user("b"));
  EXPECT_FALSE(t.edit(0, "x"));
  EXPECT_FALSE(t.remove(0));
  t.finish_reply("abort", 1);
  EXPECT_EQ(t.messages()[1].state, ChatMessage::State::Stopped);
}

TEST(ChatTranscript, RegenerateDropsTheLastAnswer) {
  ChatTranscript t;
  t.add_user("q1");
  t.begin_reply(0);
  t.append_reply("a1", 1, 1);
  t.finish_reply("stop", 1);
  t.add_user("q2");
  t.begin_reply(2);
  t.append_reply("a2", 1, 3);
  t.finish_reply("length", 3);
  ASSERT_TRUE(t.prepare_regenerate());
  EXPECT_EQ(roles(t.template_messages()), (std::vector<std::string>{"user:q1", "assistant:a1", "user:q2"}));
  EXPECT_TRUE(t.begin_reply(4).has_value());
}

TEST(ChatTranscript, EditAndDeleteChangeWhatTheModelSees) {
  ChatTranscript t;
  t.add_user("q1");
  t.begin_reply(0);
  t.append_reply("wrong", 1, 1);
  t.finish_reply("stop", 1);
  ASSERT_TRUE(t.edit(1, "right"));
  t.add_user("q2");
  ASSERT_TRUE(t.remove(0));
  EXPECT_EQ(roles(t.template_messages()), (std::vector<std::string>{"assistant:right", "user:q2"}));
}

TEST(ChatTranscript, FailedRepliesAreShownButNotSentAgain) {
  ChatTranscript t;
  t.add_user("q");
  t.begin_reply(0);
  t.fail_reply("prompt too long", 1);
  EXPECT_EQ(t.messages()[1].state, ChatMessage::State::Failed);
  EXPECT_EQ(t.messages()[1].error, "prompt too long");
  EXPECT_EQ(roles(t.template_messages()), (std::vector<std::string>{"user:q"}));
  EXPECT_TRUE(t.prepare_regenerate());
  EXPECT_EQ(t.messages().size(), 1u);
}

}  // namespace
}  // namespace cypris
