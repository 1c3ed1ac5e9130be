// The choices the completions and chat routes fill from the engine's outputs: numbered prompt * n
// + index as OpenAI numbers them, outputs of an index the request does not have ignored, and a
// streamed delta sent only when it says something.
#include "app/server/openai/choices.h"

#include <gtest/gtest.h>

namespace cypris::server {
namespace {

CompletionDelta delta(int index, std::string text, std::optional<std::string> finish = std::nullopt) {
  CompletionDelta d;
  d.index = index;
  d.text = std::move(text);
  d.finish_reason = std::move(finish);
  return d;
}

TEST(Choices, OutputsOfEachPromptAndIndexGoToTheirChoice) {
  Choices c(2, 3);  // two prompts, n = 3
  ASSERT_EQ(c.size(), 6u);
  RequestOutput first;
  first.outputs = {delta(0, "a"), delta(2, "b")};
  c.add(0, first);
  RequestOutput second;
  second.outputs = {delta(1, "c"), delta(1, "d", "stop")};
  second.outputs[1].stop_reason = "\n";
  second.outputs[1].logprobs.resize(2);
  c.add(1, second);
  c.add(0, first);
  EXPECT_EQ(c[0].text, "aa");
  EXPECT_EQ(c[2].text, "bb");
  EXPECT_EQ(c[4].text, "cd");  // prompt 1, index 1
  EXPECT_EQ(c[4].finish_reason, "stop");
  EXPECT_EQ(c[4].stop_reason, "\n");
  EXPECT_EQ(c[4].logprobs.size(), 2u);
  EXPECT_FALSE(c[1].finish_reason);
}

TEST(Choices, AnIndexTheRequestDoesNotHaveIsIgnored) {
  Choices c(1, 2);
  RequestOutput out;
  out.outputs = {delta(-1, "x"), delta(2, "y"), delta(1, "z")};
  c.add(0, out);
  EXPECT_EQ(c[0].text, "");
  EXPECT_EQ(c[1].text, "z");
  EXPECT_FALSE(c.index_of(0, delta(2, "")));
  EXPECT_FALSE(c.index_of(1, delta(0, "")));  // there is no second prompt
  EXPECT_EQ(c.index_of(0, delta(1, "")), 1u);
}

TEST(Choices, AStreamedDeltaIsSentWhenItSaysSomething) {
  EXPECT_TRUE(worth_a_chunk("hi", delta(0, "hi"), true));
  EXPECT_FALSE(worth_a_chunk("", delta(0, ""), true));  // a held-back stop string
  EXPECT_TRUE(worth_a_chunk("", delta(0, "", "length"), true));
  CompletionDelta with_logprobs = delta(0, "");
  with_logprobs.logprobs.resize(1);
  EXPECT_TRUE(worth_a_chunk("", with_logprobs, true));
  // Without a tokenizer text is always empty: every new token still gets its chunk.
  CompletionDelta token = delta(0, "");
  token.token_ids = {42};
  EXPECT_FALSE(worth_a_chunk("", token, true));
  EXPECT_TRUE(worth_a_chunk("", token, false));
  EXPECT_FALSE(worth_a_chunk("", delta(0, ""), false));
}

}  // namespace
}  // namespace cypris::server
