// GBNF and Lark-EBNF front ends (see ebnf.h): one recursive-descent parser with a mode flag.
#include "engine/guided/ebnf.h"

#include <fmt/format.h>

#include <map>

#include "engine/common/error.h"
#include "engine/guided/regex_grammar.h"

namespace cypris::guided {

namespace {

bool is_name_char(char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

// Lark's common.lark terminals, as regexes (our own spelling of the same languages).
const std::map<std::string, std::string>& lark_common() {
  static const std::map<std::string, std::string> m = {
      {"DIGIT", "[0-9]"},
      {"HEXDIGIT", "[a-fA-F0-9]"},
      {"INT", "[0-9]+"},
      {"SIGNED_INT", "[+-]?[0-9]+"},
      {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"},
      {"FLOAT", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?"},
      {"SIGNED_FLOAT", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?)"},
      {"NUMBER", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+"},
      {"SIGNED_NUMBER", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)"},
      {"ESCAPED_STRING", "\"([^\"\\\\\\n]|\\\\[^\\n])*\""},
      {"LETTER", "[a-zA-Z]"},
      {"LCASE_LETTER", "[a-z]"},
      {"UCASE_LETTER", "[A-Z]"},
      {"WORD", "[a-zA-Z]+"},
      {"CNAME", "[_a-zA-Z][_a-zA-Z0-9]*"},
      {"WS_INLINE", "[ \\t]+"},
      {"WS", "[ \\t\\f\\r\\n]+"},
      {"CR", "\\r"},
      {"LF", "\\n"},
      {"NEWLINE", "(\\r?\\n)+"},
      {"SH_COMMENT", "#[^\\n]*"},
      {"CPP_COMMENT", "//[^\\n]*"},
  };
  return m;
}

class TextGrammarParser {
 public:
  TextGrammarParser(std::string_view t, bool lark, const std::string& what) : t_(t), lark_(lark), what_(what) {}

  Grammar parse() {
    if (lark_) ignore_rule_ = b_.rule("%ignore");
    for (;;) {
      skip_space();
      if (eof()) break;
      if (lark_ && peek() == '%') {
        directive();
        continue;
      }
      definition();
    }
    if (lark_) {
      b_.define(ignore_rule_, ignores_.empty() ? empty() : star(alt(ignores_)));
      int root = b_.rule("start");
      if (!b_.defined(root)) fail_at(0, "the grammar has no 'start' rule");
      int top = b_.rule("%start");
      b_.define(top, seq({ref(ignore_rule_), ref(root), ref(ignore_rule_)}));
      return b_.build(top, what_);
    }
    int root = b_.rule("root");
    if (!b_.defined(root)) fail_at(0, "the grammar has no 'root' rule");
    return b_.build(root, what_);
  }

 private:
  [[noreturn]] void fail_at(size_t pos, const std::string& msg) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < pos && k < t_.size(); ++k) {
      if (t_[k] == '\n') ++line, col = 1;
      else ++col;
    }
    CYPRIS_FAIL("{}: {} at line {}, column {}", what_, msg, line, col);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(i_, msg); }
  bool eof() const { return i_ >= t_.size(); }
  char peek(size_t k = 0) const { return i_ + k < t_.size() ? t_[i_ + k] : '\0'; }
  // Groups, brackets and stacked quantifiers nest at most kMaxNestingDepth levels: the parser
  // recurses once per group and lowering once per level, so deeper text would overflow the stack.
  void check_depth(int levels, size_t at) const {
    if (levels <= kMaxNestingDepth) return;
    fail_at(at, fmt::format("groups, brackets and quantifiers are nested more than {} levels deep (the limit)",
                            kMaxNestingDepth));
  }

  void skip_space() {
    while (!eof()) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i_;
      } else if ((!lark_ && c == '#') || (lark_ && c == '/' && peek(1) == '/')) {
        while (!eof() && peek() != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  // Is there a rule definition at `pos`? (name, optional Lark priority, then "::=" / ":")
  bool definition_at(size_t pos) const {
    size_t k = pos;
    if (lark_ && k < t_.size() && (t_[k] == '?' || t_[k] == '!')) ++k;
    size_t start = k;
    while (k < t_.size() && is_name_char(t_[k])) ++k;
    if (k == start) return false;
    if (lark_ && k < t_.size() && t_[k] == '.') {
      ++k;
      while (k < t_.size() && isdigit(static_cast<unsigned char>(t_[k]))) ++k;
    }
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t')) ++k;
    if (lark_) return k < t_.size() && t_[k] == ':' && (k + 1 >= t_.size() || t_[k + 1] != ':');
    return t_.substr(k, 3) == "::=";
  }

  std::string name() {
    size_t start = i_;
    while (!eof() && is_name_char(peek())) ++i_;
    if (i_ == start) fail("expected a rule name");
    return std::string(t_.substr(start, i_ - start));
  }

  static bool is_terminal_name(const std::string& n) {
    for (char c : n)
      if (isalpha(static_cast<unsigned char>(c))) return isupper(static_cast<unsigned char>(c));
    return false;
  }

  void definition() {
    size_t at = i_;
    if (!definition_at(i_)) fail("expected a rule definition ('name " + std::string(lark_ ? ":" : "::=") + " ...')");
    if (lark_ && (peek() == '?' || peek() == '!')) ++i_;
    std::string n = name();
    if (lark_ && peek() == '.') {
      ++i_;
      while (!eof() && isdigit(static_cast<unsigned char>(peek()))) ++i_;
    }
    while (peek() == ' ' || peek() == '\t') ++i_;
    i_ += lark_ ? 1 : 3;
    int r = b_.rule(n);
    if (b_.defined(r)) fail_at(at, "rule '" + n + "' is defined twice");
    in_rule_ = lark_ && !is_terminal_name(n);
    b_.define(r, alternatives(0));
  }

  ExprPtr ign() { return ref(ignore_rule_); }

  ExprPtr alternatives(int depth) {
    std::vector<ExprPtr> alts{sequence(depth)};
    for (;;) {
      skip_space();
      if (peek() != '|') break;
      ++i_;
      alts.push_back(sequence(depth));
    }
    return alt(std::move(alts));
  }

  ExprPtr sequence(int depth) {
    std::vector<ExprPtr> items;
    for (;;) {
      skip_space();
      if (eof()) break;
      char c = peek();
      if (c == '|' || c == ')' || c == ']') break;
      if (lark_ && c == '%') break;
      if (lark_ && c == '-' && peek(1) == '>') {  // alias: the tree shape, not the language
        i_ += 2;
        skip_space();
        if (peek() == '?' || peek() == '!') ++i_;
        name();
        continue;
      }
      if (definition_at(i_)) {
        if (depth > 0) fail("unbalanced parenthesis before the next rule");
        break;
      }
      if (in_rule_ && !items.empty()) items.push_back(ign());
      items.push_back(postfix(depth));
    }
    return seq(std::move(items));
  }

  int count() {
    size_t start = i_;
    long v = 0;
    while (!eof() && isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeatBound) fail(fmt::format("repetition count above {}", kMaxRepeatBound));
      ++i_;
    }
    return i_ == start ? -1 : static_cast<int>(v);
  }

  ExprPtr rep(ExprPtr x, int lo, int hi) {
    if (in_rule_) x = seq({ign(), x});  // the ignored text may come between repetitions too
    return repeat(std::move(x), lo, hi);
  }

  ExprPtr postfix(int depth) {
    ExprPtr x = primary(depth);
    for (;;) {
      check_depth(depth + x->depth, i_);
      if (lark_) {  // Lark writes the repetition operator with spaces around it: "a" ~ 2..3
        size_t k = i_;
        while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t')) ++k;
        if (k < t_.size() && t_[k] == '~') i_ = k;
      }
      char c = peek();
      if (c == '*') {
        ++i_;
        x = rep(x, 0, -1);
      } else if (c == '+') {
        ++i_;
        x = rep(x, 1, -1);
      } else if (c == '?') {
        ++i_;
        x = repeat(x, 0, 1);
      } else if (!lark_ && c == '{') {
        ++i_;
        int lo = count();
        int hi = lo;
        if (peek() == ',') {
          ++i_;
          hi = count();
        }
        if (lo < 0) lo = 0;
        if (peek() != '}') fail("expected '}' to close the repetition");
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
        x = rep(x, lo, hi);
      } else if (lark_ && c == '~') {
        ++i_;
        skip_space();
        int lo = count();
        if (lo < 0) fail("expected a count after '~'");
        int hi = lo;
        skip_inline();
        if (peek() == '.' && peek(1) == '.') {
          i_ += 2;
          skip_inline();
          hi = count();
          if (hi < 0) fail("expected a count after '..'");
          if (hi < lo) fail("repetition ~ m..n with n < m");
        }
        x = rep(x, lo, hi);
      } else {
        return x;
      }
    }
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      char h = peek();
      if (!isxdigit(static_cast<unsigned char>(h))) fail(fmt::format("expected {} hex digits", n));
      v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++i_;
    }
    return v;
  }

  uint32_t utf8_cp() {
    uint32_t cp;
    const size_t n = decode_utf8(t_, i_, cp);
    if (n == 0) fail("invalid UTF-8");
    i_ += n;
    return cp;
  }

  // One character of a literal or class, escapes decoded.
  uint32_t char_or_escape() {
    if (peek() != '\\') return utf8_cp();
    ++i_;
    char e = peek();
    ++i_;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u':
      case 'U': {
        // A code point must be a Unicode scalar value: surrogates and values past U+10FFFF have
        // no UTF-8 encoding (the grammar would emit invalid UTF-8).
        const size_t at = i_ - 2;
        const uint32_t v = hex(e == 'u' ? 4 : 8);
        if (v > 0x10FFFF) fail_at(at, fmt::format("the escape \\{} gives U+{:X}, above U+10FFFF (the last code point)", e, v));
        if (v >= 0xD800 && v <= 0xDFFF)
          fail_at(at, fmt::format("the escape \\{} gives U+{:X}, a UTF-16 surrogate (not a character)", e, v));
        return v;
      }
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^':
        return static_cast<uint8_t>(e);
      default:
        --i_;
        fail(fmt::format("unknown escape '\\{}'", e));
    }
  }

  ExprPtr string_literal() {
    size_t at = i_;
    ++i_;
    std::vector<uint32_t> cps;
    while (peek() != '"') {
      if (eof() || peek() == '\n') fail_at(at, "unterminated string literal");
      cps.push_back(char_or_escape());
    }
    ++i_;
    bool ci = false;
    if (lark_ && peek() == 'i' && !is_name_char(peek(1))) {
      ++i_;
      ci = true;
    }
    if (lark_ && peek() == '.' && peek(1) == '.') {  // "a".."z"
      i_ += 2;
      skip_space();
      if (peek() != '"') fail("expected a string after '..'");
      size_t at2 = i_;
      ++i_;
      uint32_t hi = char_or_escape();
      if (peek() != '"') fail_at(at2, "a range bound must be one character");
      ++i_;
      if (cps.size() != 1) fail_at(at, "a range bound must be one character");
      if (hi < cps[0]) fail_at(at, "range out of order");
      return codepoints({{cps[0], hi}});
    }
    std::vector<ExprPtr> items;
    for (uint32_t cp : cps) {
      if (ci && isalpha(static_cast<int>(cp)) && cp < 0x80) {
        items.push_back(codepoints({{static_cast<uint32_t>(tolower(static_cast<int>(cp))),
                                     static_cast<uint32_t>(tolower(static_cast<int>(cp)))},
                                    {static_cast<uint32_t>(toupper(static_cast<int>(cp))),
                                     static_cast<uint32_t>(toupper(static_cast<int>(cp)))}}));
      } else {
        items.push_back(literal(utf8_encode(cp)));
      }
    }
    return flat(seq(std::move(items)));
  }

  ExprPtr char_class() {
    size_t at = i_;
    ++i_;
    bool neg = false;
    if (peek() == '^') {
      neg = true;
      ++i_;
    }
    CodepointRanges r;
    while (peek() != ']') {
      if (eof()) fail_at(at, "unterminated character class");
      size_t range_at = i_;
      uint32_t lo = char_or_escape(), hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        ++i_;
        hi = char_or_escape();
        if (hi < lo) fail_at(range_at, "range out of order in character class");
      }
      r.push_back({lo, hi});
    }
    ++i_;
    return codepoints(neg ? complement_ranges(r) : r);
  }

  ExprPtr regex_literal() {
    size_t at = i_;
    ++i_;
    std::string body;
    while (peek() != '/') {
      if (eof() || peek() == '\n') fail_at(at, "unterminated /regex/");
      if (peek() == '\\' && peek(1) == '/') {
        body += '/';
        i_ += 2;
        continue;
      }
      if (peek() == '\\') body += t_[i_++];
      body += t_[i_++];
    }
    ++i_;
    RegexOptions o;
    while (isalpha(static_cast<unsigned char>(peek()))) {
      char f = peek();
      if (f == 's') o.dot_all = true;
      else fail(fmt::format("regex flag '{}' is not supported", f));
      ++i_;
    }
    try {
      return regex_to_expr(body, "regex", o);
    } catch (const Error& e) {
      fail_at(at, e.what());
    }
  }

  ExprPtr primary(int depth) {
    char c = peek();
    if (c == '"') return string_literal();
    if (c == '(') {
      size_t at = i_;
      check_depth(depth + 1, at);
      ++i_;
      ExprPtr e = alternatives(depth + 1);
      skip_space();
      if (peek() != ')') fail_at(at, "unbalanced '('");
      ++i_;
      return e;
    }
    if (c == '[') {
      if (!lark_) return char_class();
      size_t at = i_;
      check_depth(depth + 1, at);
      ++i_;
      ExprPtr e = alternatives(depth + 1);
      skip_space();
      if (peek() != ']') fail_at(at, "unbalanced '['");
      ++i_;
      return opt(e);
    }
    if (!lark_ && c == '.') {
      ++i_;
      return any_char();
    }
    if (lark_ && c == '/') return regex_literal();
    if (!lark_ && c == '<') fail("token references '<...>' are not supported");
    if (lark_ && c == '\'') fail("use double quotes for literals");
    if (is_name_char(c)) return ref(b_.rule(name()));
    fail(fmt::format("unexpected '{}'", c));
  }

  void directive() {
    size_t at = i_;
    ++i_;
    std::string d = name();
    skip_inline();
    if (d == "ignore") {
      bool saved = in_rule_;
      in_rule_ = false;
      if (peek() == '(') fail("use one %ignore per item");
      ignores_.push_back(postfix(0));
      in_rule_ = saved;
      return;
    }
    if (d == "import") {
      std::string mod = dotted();
      if (mod.rfind("common.", 0) == 0) {
        std::string term = mod.substr(7), alias = term;
        skip_inline();
        if (peek() == '-' && peek(1) == '>') {
          i_ += 2;
          skip_inline();
          alias = name();
        }
        import_common(term, alias, at);
        return;
      }
      if (mod == "common" && (skip_inline(), peek() == '(')) {
        ++i_;
        for (;;) {
          skip_space();
          std::string term = name();
          import_common(term, term, at);
          skip_space();
          if (peek() == ',') {
            ++i_;
            continue;
          }
          if (peek() != ')') fail("expected ')' to close the import list");
          ++i_;
          return;
        }
      }
      fail_at(at, "only %import common.NAME is supported (module '" + mod + "')");
    }
    fail_at(at, "directive %" + d + " is not supported (supported: %import common.NAME, %ignore)");
  }

  void skip_inline() {
    while (peek() == ' ' || peek() == '\t') ++i_;
  }
  std::string dotted() {
    size_t start = i_;
    while (!eof() && (is_name_char(peek()) || peek() == '.')) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  void import_common(const std::string& term, const std::string& alias, size_t at) {
    auto it = lark_common().find(term);
    if (it == lark_common().end()) fail_at(at, "common." + term + " is not one of the supported common terminals");
    int r = b_.rule(alias);
    if (b_.defined(r)) fail_at(at, "rule '" + alias + "' is defined twice");
    b_.define(r, regex_to_expr(it->second, "common." + term));
  }

  std::string_view t_;
  bool lark_;
  std::string what_;
  size_t i_ = 0;
  GrammarBuilder b_;
  bool in_rule_ = false;
  int ignore_rule_ = -1;
  std::vector<ExprPtr> ignores_;
};

}  // namespace

namespace {
Grammar parse_text_grammar(std::string_view text, bool lark, const std::string& what) {
  CYPRIS_CHECK(text.size() <= kMaxGrammarTextBytes, "{}: the grammar is {} bytes long; at most {} (the limit)", what,
               text.size(), kMaxGrammarTextBytes);
  CompileBudget budget(what);
  return TextGrammarParser(text, lark, what).parse();
}
}  // namespace

Grammar gbnf_grammar(std::string_view text, const std::string& what) { return parse_text_grammar(text, false, what); }

Grammar lark_grammar(std::string_view text, const std::string& what) { return parse_text_grammar(text, true, what); }

}  // namespace cypris::guided
