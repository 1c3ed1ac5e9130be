// Regex front end (see regex_grammar.h): a recursive-descent parser straight into grammar
// expressions.
#include "engine/guided/regex_grammar.h"

#include <fmt/format.h>

#include "engine/common/error.h"

namespace cypris::guided {

ExprPtr char_class_expr(const CodepointRanges& ranges, bool json_string) {
  if (!json_string) return codepoints(ranges);
  CodepointRanges plain;
  std::vector<ExprPtr> alts;
  for (auto [lo, hi] : normalize_ranges(ranges)) {
    for (uint32_t c = lo; c <= hi && c < 0x20; ++c) {
      static const char* names[] = {"u0000", "u0001", "u0002", "u0003", "u0004", "u0005", "u0006", "u0007",
                                    "b",     "t",     "n",     "u000b", "f",     "r",     "u000e", "u000f",
                                    "u0010", "u0011", "u0012", "u0013", "u0014", "u0015", "u0016", "u0017",
                                    "u0018", "u0019", "u001a", "u001b", "u001c", "u001d", "u001e", "u001f"};
      alts.push_back(literal(std::string("\\") + names[c]));
    }
    if (lo <= '"' && hi >= '"') alts.push_back(literal("\\\""));
    if (lo <= '\\' && hi >= '\\') alts.push_back(literal("\\\\"));
    plain.push_back({std::max<uint32_t>(lo, 0x20), hi});
  }
  plain = complement_ranges(plain);
  plain.push_back({0, 0x1F});
  plain.push_back({'"', '"'});
  plain.push_back({'\\', '\\'});
  plain = complement_ranges(plain);
  if (!plain.empty()) alts.insert(alts.begin(), codepoints(plain));
  if (alts.empty()) return bytes(ByteSet{});
  return flat(alt(std::move(alts)));
}

namespace {

class RegexParser {
 public:
  RegexParser(std::string_view p, const std::string& what, RegexOptions o) : p_(p), what_(what), opts_(o) {}

  ExprPtr parse() {
    ExprPtr e = alternation(0);
    if (i_ < p_.size()) fail("unbalanced ')'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    // A long pattern is quoted by its start only: the message must not echo megabytes back.
    constexpr size_t kQuote = 80;
    if (p_.size() <= kQuote) CYPRIS_FAIL("{}: {} at position {} of regex '{}'", what_, msg, i_, std::string(p_));
    CYPRIS_FAIL("{}: {} at position {} of regex '{}...' ({} bytes)", what_, msg, i_, std::string(p_.substr(0, kQuote)),
                p_.size());
  }
  bool eof() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }
  // Groups and stacked quantifiers nest at most kMaxNestingDepth levels: the parser recurses once
  // per group and lowering once per level, so deeper patterns would overflow the stack.
  void check_depth(int levels, size_t at) {
    if (levels <= kMaxNestingDepth) return;
    i_ = at;
    fail(fmt::format("groups and quantifiers are nested more than {} levels deep (the limit)", kMaxNestingDepth));
  }

  ExprPtr alternation(int depth) {
    std::vector<ExprPtr> alts{concat(depth)};
    while (!eof() && peek() == '|') {
      ++i_;
      alts.push_back(concat(depth));
    }
    return alt(std::move(alts));
  }

  ExprPtr concat(int depth) {
    std::vector<ExprPtr> items;
    while (!eof() && peek() != '|' && peek() != ')') {
      if (peek() == '^') {
        if (!items.empty() || depth > 0) fail("'^' is only supported at the start (the whole text must match)");
        ++i_;
        continue;
      }
      if (peek() == '$') {
        ++i_;
        if (!eof() && peek() != '|' && peek() != ')') fail("'$' is only supported at the end");
        continue;
      }
      items.push_back(quantified(depth));
    }
    return seq(std::move(items));
  }

  int number() {
    size_t start = i_;
    long v = 0;
    while (!eof() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeatBound) fail(fmt::format("repetition count above {}", kMaxRepeatBound));
      ++i_;
    }
    return i_ == start ? -1 : static_cast<int>(v);
  }

  ExprPtr quantified(int depth) {
    ExprPtr a = atom(depth);
    while (!eof()) {
      char c = peek();
      int lo, hi;
      size_t at = i_;
      if (c == '*') {
        lo = 0, hi = -1, ++i_;
      } else if (c == '+') {
        lo = 1, hi = -1, ++i_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++i_;
      } else if (c == '{') {
        ++i_;
        lo = number();
        if (lo < 0) {  // a literal '{' (as PCRE reads it)
          i_ = at;
          return a;
        }
        hi = lo;
        if (!eof() && peek() == ',') {
          ++i_;
          hi = number();
        }
        if (eof() || peek() != '}') fail("unterminated {m,n} quantifier");
        ++i_;
        if (hi >= 0 && hi < lo) fail(fmt::format("quantifier {{{},{}}} has max < min", lo, hi));
      } else {
        return a;
      }
      if (!eof() && peek() == '?') ++i_;  // lazy: same language
      else if (!eof() && peek() == '+') fail("possessive quantifiers are not supported");
      a = repeat(a, lo, hi);
      check_depth(depth + a->depth, at);
    }
    return a;
  }

  ExprPtr chars(const CodepointRanges& r) { return char_class_expr(r, opts_.json_string); }

  ExprPtr atom(int depth) {
    char c = peek();
    if (c == '(') {
      size_t at = i_;
      ++i_;
      if (!eof() && peek() == '?') {
        ++i_;
        if (eof()) fail("unterminated group");
        char k = peek();
        if (k == ':') {
          ++i_;
        } else if (k == '=' || k == '!') {
          i_ = at;
          fail("lookahead assertions are not supported");
        } else if (k == '<' && i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!')) {
          i_ = at;
          fail("lookbehind assertions are not supported");
        } else if (k == 'P' && i_ + 1 < p_.size() && p_[i_ + 1] == '=') {
          i_ = at;
          fail("backreferences are not supported");
        } else if (k == '<' || k == 'P' || k == '\'') {
          // named group: skip the name
          size_t close = p_.find_first_of(">'", i_ + 1);
          if (close == std::string_view::npos) fail("unterminated group name");
          i_ = close + 1;
        } else {
          i_ = at;
          fail("inline flags and special groups '(?...' are not supported");
        }
      }
      check_depth(depth + 1, at);
      ExprPtr e = alternation(depth + 1);
      if (eof() || peek() != ')') {
        i_ = at;
        fail("unbalanced '('");
      }
      ++i_;
      return e;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      if (opts_.dot_all) return chars({{0, 0x10FFFF}});
      return chars(complement_ranges({{'\n', '\n'}}));
    }
    if (c == '*' || c == '+' || c == '?') fail(fmt::format("nothing to repeat before '{}'", c));
    if (c == '\\') {
      CodepointRanges r;
      escape(r, false);
      return chars(r);
    }
    uint32_t cp = utf8_cp();
    return chars({{cp, cp}});
  }

  uint32_t utf8_cp() {
    uint32_t cp;
    const size_t n = decode_utf8(p_, i_, cp);
    if (n == 0) fail("invalid UTF-8");
    i_ += n;
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (eof() || !isxdigit(static_cast<unsigned char>(peek()))) fail(fmt::format("expected {} hex digits", digits));
      char h = peek();
      v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++i_;
    }
    return v;
  }

  // The code point of \xHH or \uHHHH (fixed_digits hex digits), or of either with braces:
  // \x{H...} with 1 to 6 digits, at most U+10FFFF.
  uint32_t codepoint_escape(int fixed_digits) {
    if (eof() || peek() != '{') return hex(fixed_digits);
    ++i_;
    uint32_t v = 0;
    int digits = 0;
    while (!eof() && peek() != '}') {
      if (++digits > 6) fail("more than 6 hex digits in a \\x{...} escape");
      v = v * 16 + hex(1);
    }
    if (eof()) fail("unterminated \\x{...} escape");
    ++i_;
    if (digits == 0) fail("empty \\x{} escape");
    if (v > 0x10FFFF) fail(fmt::format("code point U+{:X} in an escape is above U+10FFFF", v));
    return v;
  }

  // Parses an escape at '\'; adds its code points to r. Returns true when it was a single code point.
  void escape(CodepointRanges& r, bool in_class) {
    size_t at = i_;
    ++i_;
    if (eof()) fail("trailing backslash");
    char e = peek();
    ++i_;
    static const CodepointRanges digit{{'0', '9'}};
    static const CodepointRanges word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const CodepointRanges space{{'\t', '\r'}, {' ', ' '}};
    auto add = [&](const CodepointRanges& x) { r.insert(r.end(), x.begin(), x.end()); };
    switch (e) {
      case 'd': add(digit); return;
      case 'D': add(complement_ranges(digit)); return;
      case 'w': add(word); return;
      case 'W': add(complement_ranges(word)); return;
      case 's': add(space); return;
      case 'S': add(complement_ranges(space)); return;
      case 'n': r.push_back({'\n', '\n'}); return;
      case 't': r.push_back({'\t', '\t'}); return;
      case 'r': r.push_back({'\r', '\r'}); return;
      case 'f': r.push_back({'\f', '\f'}); return;
      case 'v': r.push_back({'\v', '\v'}); return;
      case '0': r.push_back({0, 0}); return;
      case 'x':
      case 'u': {
        const uint32_t v = codepoint_escape(e == 'x' ? 2 : 4);
        if (v >= 0xD800 && v <= 0xDFFF) {
          i_ = at;
          fail(fmt::format("the escape gives U+{:X}, a UTF-16 surrogate (not a character)", v));
        }
        r.push_back({v, v});
        return;
      }
      case 'b':
        if (in_class) {
          r.push_back({'\b', '\b'});
          return;
        }
        [[fallthrough]];
      case 'B': case 'A': case 'Z': case 'z': case 'G':
        i_ = at;
        fail(fmt::format("the assertion '\\{}' is not supported", e));
      case 'k':
        i_ = at;
        fail("backreferences are not supported");
      case 'p': case 'P':
        i_ = at;
        fail("Unicode property classes '\\p{...}' are not supported");
      default:
        if (e >= '1' && e <= '9') {
          i_ = at;
          fail("backreferences are not supported");
        }
        if (isalnum(static_cast<unsigned char>(e))) {
          i_ = at;
          fail(fmt::format("unknown escape '\\{}'", e));
        }
        --i_;
        uint32_t cp = utf8_cp();
        r.push_back({cp, cp});
    }
  }

  ExprPtr char_class() {
    size_t at = i_;
    ++i_;
    bool negated = false;
    if (!eof() && peek() == '^') {
      negated = true;
      ++i_;
    }
    CodepointRanges r;
    bool first = true;
    while (true) {
      if (eof()) {
        i_ = at;
        fail("unterminated character class");
      }
      if (peek() == ']' && !first) break;
      first = false;
      if (peek() == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') fail("POSIX classes [:name:] are not supported");
      uint32_t lo;
      if (peek() == '\\') {
        CodepointRanges one;
        escape(one, true);
        if (one.size() != 1 || one[0].first != one[0].second) {  // \d etc.: no range
          r.insert(r.end(), one.begin(), one.end());
          continue;
        }
        lo = one[0].first;
      } else {
        lo = utf8_cp();
      }
      uint32_t hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          CodepointRanges one;
          escape(one, true);
          if (one.size() != 1 || one[0].first != one[0].second) fail("a class like \\d cannot end a range");
          hi = one[0].first;
        } else {
          hi = utf8_cp();
        }
        if (hi < lo) fail("range out of order in character class");
      }
      r.push_back({lo, hi});
    }
    ++i_;
    if (negated) r = complement_ranges(r);
    return chars(r);
  }

  std::string_view p_;
  const std::string& what_;
  RegexOptions opts_;
  size_t i_ = 0;
};

}  // namespace

ExprPtr regex_to_expr(std::string_view pattern, const std::string& what, RegexOptions opts) {
  CYPRIS_CHECK(pattern.size() <= kMaxPatternBytes, "{}: the regex is {} bytes long; at most {} (the limit)", what,
               pattern.size(), kMaxPatternBytes);
  CompileBudget budget(what);
  return RegexParser(pattern, what, opts).parse();
}

Grammar regex_grammar(std::string_view pattern, const std::string& what) {
  CompileBudget budget(what);
  GrammarBuilder b;
  int root = b.rule("root");
  b.define(root, regex_to_expr(pattern, what));
  return b.build(root, what);
}

}  // namespace cypris::guided
