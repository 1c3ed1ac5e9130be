// The regex front end against PCRE2 (an independent regex engine): for each pattern, random strings
// over the pattern's alphabet — and strings sampled from our own grammar — must be accepted by the
// grammar exactly when PCRE2 matches them in full.
#include <gtest/gtest.h>

#include <random>

#include "engine/guided/matcher.h"
#include "engine/guided/regex_grammar.h"
#include "engine/tokenizer/regex.h"

namespace cypris::guided {
namespace {

bool grammar_matches(StackArena& arena, std::string_view text) {
  Stepper st(arena);
  MatchState s = st.initial();
  return st.advance(s, text) && s.can_end;
}

// A random string the grammar accepts: random allowed bytes until it may end (and a coin says so).
std::string sample(StackArena& arena, std::mt19937_64& rng) {
  Stepper st(arena);
  MatchState s = st.initial();
  std::string out;
  for (int i = 0; i < 64; ++i) {
    if (s.can_end && (s.tops.empty() || rng() % 4 == 0)) return out;
    ByteSet next = st.next_bytes(s);
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b)
      if (next.test(b)) bytes.push_back(b);
    if (bytes.empty()) return out;
    uint8_t b = static_cast<uint8_t>(bytes[rng() % bytes.size()]);
    out += static_cast<char>(b);
    s = st.advance(s, b);
  }
  return s.can_end ? out : std::string("\x01unfinished");
}

TEST(GuidedRegex, AgreesWithPcre2) {
  struct Case {
    std::string pattern;
    std::string alphabet;
  };
  const std::vector<Case> cases = {
      {"a(b|c)*d", "abcd"},
      {"[a-c]{2,4}", "abcd"},
      {"(ab|a)(bc|c)?", "abc"},
      {"x?y+z*", "xyz"},
      {"[^ab]b{0,2}", "abcx"},
      {"\\d+(\\.\\d{1,2})?", "12.a"},
      {"(a|b){3}", "ab"},
      {"[\\w-]+@[a-z]+", "a_-@z1"},
      {"(?:red|green)(?<n> [0-9])?", "redgn 1"},
      {"a.c", "ab\nc"},
      {"[é€a]{1,2}", "aé€"},
      {"\\s*\\S", " \tq"},
      {"(a*)*b", "ab"},
      {"^(yes|no)$", "yesno"},
  };
  std::mt19937_64 rng(7);
  for (const auto& c : cases) {
    StackArena arena(std::make_shared<Grammar>(regex_grammar(c.pattern)));
    Regex re("(?:" + c.pattern + ")\\z", false, "test");
    // Code points of the alphabet (it may hold multi-byte characters).
    std::vector<std::string> chars;
    for (size_t i = 0; i < c.alphabet.size();) {
      size_t n = 1;
      unsigned char b = c.alphabet[i];
      if (b >= 0xF0) n = 4;
      else if (b >= 0xE0) n = 3;
      else if (b >= 0xC0) n = 2;
      chars.push_back(c.alphabet.substr(i, n));
      i += n;
    }
    int accepted = 0;
    for (int k = 0; k < 400; ++k) {
      std::string s;
      size_t len = rng() % 7;
      for (size_t i = 0; i < len; ++i) s += chars[rng() % chars.size()];
      bool ours = grammar_matches(arena, s), pcre = re.matches_at(s, 0);
      accepted += ours;
      EXPECT_EQ(ours, pcre) << "pattern " << c.pattern << " text '" << s << "'";
    }
    for (int k = 0; k < 50; ++k) {
      std::string s = sample(arena, rng);
      if (s == "\x01unfinished") continue;
      EXPECT_TRUE(re.matches_at(s, 0)) << "pattern " << c.pattern << " sampled '" << s << "'";
    }
    (void)accepted;
  }
}

TEST(GuidedRegex, JsonStringModeEscapes) {
  // Inside a JSON string a quote, a backslash and a newline are written as escapes.
  StackArena arena(std::make_shared<Grammar>([] {
    GrammarBuilder b;
    int r = b.rule("root");
    b.define(r, regex_to_expr("a[\"\\\\\\n]b", "pattern", RegexOptions{.json_string = true}));
    return b.build(r, "pattern");
  }()));
  EXPECT_TRUE(grammar_matches(arena, "a\\\"b"));
  EXPECT_TRUE(grammar_matches(arena, "a\\\\b"));
  EXPECT_TRUE(grammar_matches(arena, "a\\nb"));
  EXPECT_FALSE(grammar_matches(arena, "a\"b"));
  EXPECT_FALSE(grammar_matches(arena, "a\nb"));
}

}  // namespace
}  // namespace cypris::guided
