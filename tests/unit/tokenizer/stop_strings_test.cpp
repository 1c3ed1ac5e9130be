// Stop strings caught across token boundaries, with the text before them released exactly once.
#include "engine/tokenizer/stop_strings.h"

#include <gtest/gtest.h>

#include "engine/tokenizer/incremental_detokenizer.h"
#include "tests/unit/tokenizer/tokenizer_test_util.h"

namespace cypris {
namespace {

TEST(StopStrings, CatchesAStopSplitAcrossDeltas) {
  StopStringMatcher m({"###"});
  auto a = m.push("Hello #");
  EXPECT_EQ(a.text, "Hello ");
  EXPECT_FALSE(a.stopped());
  auto b = m.push("#");
  EXPECT_EQ(b.text, "");
  auto c = m.push("# rest");
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.stop_index, 0u);
  EXPECT_EQ(c.text, "");
  EXPECT_TRUE(m.push("more").text.empty());
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, IncludeStopStringInOutput) {
  StopStringMatcher m({"</s>", "STOP"}, true);
  EXPECT_EQ(m.push("abc ST").text, "abc ");
  auto r = m.push("OP and more");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.stop_index, 1u);
  EXPECT_EQ(r.text, "STOP");
}

TEST(StopStrings, ReleasesHeldTextOnceItCannotStartAStop) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.push("xa").text, "x");
  EXPECT_EQ(m.push("b").text, "");
  EXPECT_EQ(m.push("x").text, "abx");
  EXPECT_EQ(m.push("ab").text, "");
  EXPECT_EQ(m.flush(), "ab");
}

TEST(StopStrings, EarliestStopWins) {
  StopStringMatcher m({"world", "lo w"});
  auto r = m.push("hello world");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.stop_index, 1u);
  EXPECT_EQ(r.text, "hel");
}

TEST(StopStrings, OverlappingPrefixesHoldTheLongestCandidate) {
  StopStringMatcher m({"aab"});
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "a");  // "aaa": only "aa" can still begin "aab"
  auto r = m.push("b!");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.text, "");
}

TEST(StopStrings, NoStopsPassesEverythingThrough) {
  StopStringMatcher m({"", ""});
  EXPECT_EQ(m.push("anything").text, "anything");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, WorksOnRealTokenStreams) {
  const Tokenizer& tok = testing::cached_tokenizer("llama3-bpe");
  std::string text = "The answer is 42.\nUser: what next?";
  auto ids = tok.encode(text, false);
  for (bool include : {false, true}) {
    IncrementalDetokenizer detok(tok);
    StopStringMatcher stop({"\nUser:"}, include);
    std::string out;
    bool stopped = false;
    for (int32_t id : ids) {
      auto r = stop.push(detok.push(id));
      out += r.text;
      if (r.stopped()) {
        stopped = true;
        break;
      }
    }
    EXPECT_TRUE(stopped);
    EXPECT_EQ(out, include ? "The answer is 42.\nUser:" : "The answer is 42.");
  }
}

}  // namespace
}  // namespace cypris
