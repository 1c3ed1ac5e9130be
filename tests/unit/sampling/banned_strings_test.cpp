// banned_strings: detection across token boundaries, the rewind target, held-back streaming text,
// and agreement with a naive search over thousands of phrases.
#include "engine/sampling/banned_strings.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/common/error.h"

namespace cypris {
namespace {

std::shared_ptr<const BannedStrings> phrases(std::vector<std::string> p) {
  return std::make_shared<const BannedStrings>(p);
}

TEST(BannedStrings, PhraseBeginningInAnEarlierTokenRewindsToThatToken) {
  BannedStringMatcher m(phrases({"he", "she", "his", "hers"}));
  EXPECT_FALSE(m.push(10, "us"));
  // "us" + "hers" = "ushers": "she" starts at byte 1, inside token 0 ("us"); "he"/"hers" start at 2.
  auto hit = m.push(11, "hers");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->token_index, 0u);
  EXPECT_EQ(hit->rewind_tokens, 2u);
  EXPECT_EQ(hit->ban_token_id, 10);
  EXPECT_EQ(hit->phrase_index, 1u);  // "she"
  EXPECT_EQ(hit->text_offset, 1u);
}

TEST(BannedStrings, RewindAndRetry) {
  BannedStringMatcher m(phrases({"hello world"}));
  EXPECT_FALSE(m.push(1, "say"));
  EXPECT_FALSE(m.push(2, " hel"));
  EXPECT_FALSE(m.push(3, "lo"));
  auto hit = m.push(4, " world");
  ASSERT_TRUE(hit);
  // the phrase starts at byte 4, inside " hel" (bytes 3..6)
  EXPECT_EQ(hit->token_index, 1u);
  EXPECT_EQ(hit->rewind_tokens, 3u);
  EXPECT_EQ(hit->ban_token_id, 2);
  m.rewind(hit->rewind_tokens);
  EXPECT_EQ(m.text(), "say");
  EXPECT_EQ(m.num_tokens(), 1u);
  // the model now takes another path: no phrase
  EXPECT_FALSE(m.push(5, " hi"));
  EXPECT_FALSE(m.push(6, " world"));
  EXPECT_EQ(m.text(), "say hi world");
  // and the same phrase spelled in other tokens is still caught after the rewind
  m.rewind(2);
  EXPECT_FALSE(m.push(7, " hello"));
  hit = m.push(8, " world");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->ban_token_id, 7);
  EXPECT_EQ(hit->rewind_tokens, 2u);
}

TEST(BannedStrings, HoldsBackTextThatMayStartAPhrase) {
  BannedStringMatcher m(phrases({"hello world"}));
  m.push(1, "say");
  EXPECT_EQ(m.safe_length(), 3u);
  m.push(2, " hel");  // "hel" could begin the phrase: hold back from the start of " hel"
  EXPECT_EQ(m.safe_length(), 3u);
  m.push(3, "lo");
  EXPECT_EQ(m.safe_length(), 3u);
  m.push(4, " there");  // no longer a prefix of the phrase: everything is safe
  EXPECT_EQ(m.safe_length(), m.text().size());
  m.push(5, "h");  // 'h' alone could begin it again
  EXPECT_EQ(m.safe_length(), m.text().size() - 1);
}

TEST(BannedStrings, CaseSensitive) {
  BannedStringMatcher m(phrases({"Hello"}));
  EXPECT_FALSE(m.push(1, "hello"));
  EXPECT_TRUE(m.push(2, " Hello"));
}

TEST(BannedStrings, EmptyTokenThatBeganACharacterIsTheOneBanned) {
  // token 5 carries the first byte of "é" (the detokenizer shows nothing yet), token 6 completes it
  BannedStringMatcher m(phrases({"\xC3\xA9t\xC3\xA9"}));
  m.push(4, "l");
  m.push(5, "");
  m.push(6, "\xC3\xA9t");
  auto hit = m.push(7, "\xC3\xA9");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->token_index, 1u);
  EXPECT_EQ(hit->ban_token_id, 5);
  EXPECT_EQ(hit->rewind_tokens, 3u);
}

TEST(BannedStrings, EmptyPhraseIsAnError) {
  try {
    BannedStrings b(std::vector<std::string>{"ok", ""});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("banned_strings"), std::string::npos);
  }
}

TEST(BannedStrings, ThousandsOfPhrasesAgreeWithNaiveSearch) {
  // 3000 phrases over a 4-letter alphabet (so they overlap a lot); random token streams. The first
  // hit must be the earliest-starting phrase that ends in the pushed token, as a naive search finds.
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> len(2, 7), letter(0, 3), tok_len(0, 4);
  std::vector<std::string> list;
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    for (int k = len(gen); k > 0; --k) s += static_cast<char>('a' + letter(gen));
    list.push_back(s);
  }
  auto set = phrases(list);
  int hits = 0;
  for (int trial = 0; trial < 200; ++trial) {
    BannedStringMatcher m(set);
    std::string text;
    std::vector<size_t> offsets;
    for (int t = 0; t < 12; ++t) {
      std::string piece;
      for (int k = tok_len(gen); k > 0; --k) piece += static_cast<char>('a' + letter(gen));
      const size_t before = text.size();
      offsets.push_back(before);
      text += piece;
      // naive: earliest start among phrases ending inside this piece
      std::optional<size_t> start;
      for (const auto& p : list) {
        for (size_t end = std::max(before, p.size()); end <= text.size(); ++end) {
          if (end == before) continue;
          if (text.compare(end - p.size(), p.size(), p) == 0 && (!start || end - p.size() < *start)) {
            start = end - p.size();
          }
        }
      }
      auto hit = m.push(100 + t, piece);
      ASSERT_EQ(hit.has_value(), start.has_value()) << text;
      if (!hit) continue;
      ++hits;
      EXPECT_EQ(hit->text_offset, *start) << text;
      // the token holding that byte (the first one starting exactly there, if any)
      size_t want_tok = 0;
      for (size_t i = 0; i < offsets.size(); ++i) {
        if (offsets[i] <= *start) want_tok = i;
      }
      for (size_t i = 0; i < offsets.size(); ++i) {
        if (offsets[i] == *start) {
          want_tok = i;
          break;
        }
      }
      EXPECT_EQ(hit->token_index, want_tok) << text;
      m.rewind(hit->rewind_tokens);
      text.resize(offsets[want_tok]);
      offsets.resize(want_tok);
      EXPECT_EQ(m.text(), text);
    }
  }
  EXPECT_GT(hits, 100);  // the setup really exercises hits
}

}  // namespace
}  // namespace cypris
