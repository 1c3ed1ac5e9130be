// Jinja lexer (see lexer.h). Whitespace rules follow Jinja2's lexer: `{%-` strips all whitespace
// before the tag, `-%}` all whitespace after it; lstrip_blocks strips a line's leading spaces and
// tabs before a block/comment tag; trim_blocks removes one newline after a block/comment tag.
#include "engine/chat/jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "engine/common/error.h"

namespace cypris::jinja {

void throw_template_error(const SourcePos& pos, const std::string& msg) {
  throw Error(fmt::format("chat template: line {}, column {}: {}", pos.line, pos.column, msg));
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexerOptions& opts) : opts_(opts) {
    // Like Jinja: normalise newlines and drop one trailing newline.
    src_.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_ += '\n';
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_ += src[i];
      }
    }
    if (!opts_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t k = find_tag(pos);
      if (k == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      std::string text = src_.substr(pos, k - pos);
      char kind = src_[k + 1];
      char mod = k + 2 < n && (src_[k + 2] == '-' || src_[k + 2] == '+') ? src_[k + 2] : 0;
      size_t inner = k + 2 + (mod ? 1 : 0);
      bool raw = kind == '%' && is_keyword_tag(inner, "raw");
      apply_lstrip(text, mod, kind != '{', line_starting);
      emit_text(std::move(text), pos);
      if (kind == '#') {
        pos = lex_comment(k, inner);
      } else if (raw) {
        pos = lex_raw(k, inner);
      } else {
        pos = lex_tag(k, kind, inner);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{TokenType::Eof, {}, 0, 0.0, pos_of(n)});
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t start = line_starts_[line - 1];
    // Offsets mostly increase, so continue counting code points from the previous call.
    size_t from = start;
    int col = 1;
    if (cache_line_ == line && cache_offset_ <= offset) {
      from = cache_offset_;
      col = cache_col_;
    }
    for (size_t i = from; i < offset && i < src_.size(); ++i)
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++col;
    cache_line_ = line;
    cache_offset_ = offset;
    cache_col_ = col;
    return SourcePos{static_cast<int>(line), col};
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // Whether the tag content starting at `at` is exactly the keyword (e.g. "raw") then the tag end.
  bool is_keyword_tag(size_t at, std::string_view word) const {
    size_t i = at;
    while (i < src_.size() && is_space(src_[i])) ++i;
    if (src_.compare(i, word.size(), word) != 0) return false;
    i += word.size();
    while (i < src_.size() && is_space(src_[i])) ++i;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    return src_.compare(i, 2, "%}") == 0;
  }

  void apply_lstrip(std::string& text, char mod, bool block_or_comment, bool line_starting) const {
    if (mod == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (mod != '+' && opts_.lstrip_blocks && block_or_comment) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if (l_pos > 0 || line_starting) {
        bool only_ws = std::all_of(text.begin() + l_pos, text.end(), [](char c) { return c == ' ' || c == '\t'; });
        if (only_ws) text.resize(l_pos);
      }
    }
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenType::Text, std::move(text), 0, 0.0, pos_of(offset)});
  }

  // After a block/comment end at `end` (one past the closing brace): `-` strips all whitespace,
  // otherwise trim_blocks removes one newline.
  size_t after_block_end(size_t end, char mod) const {
    if (mod == '-') {
      while (end < src_.size() && is_space(src_[end])) ++end;
    } else if (mod != '+' && opts_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  size_t lex_comment(size_t start, size_t inner) {
    size_t e = src_.find("#}", inner);
    if (e == std::string::npos) throw_template_error(pos_of(start), "unclosed comment: missing '#}'");
    char mod = e > inner && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : 0;
    return after_block_end(e + 2, mod);
  }

  size_t lex_raw(size_t start, size_t inner) {
    size_t i = src_.find("%}", inner);
    // Jinja applies trim_blocks to {% endraw %} but not to {% raw %}: only `-%}` strips here.
    size_t body = i + 2;
    if (src_[i - 1] == '-')
      while (body < src_.size() && is_space(src_[body])) ++body;
    for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 2)) {
      char mod = k + 2 < src_.size() && (src_[k + 2] == '-' || src_[k + 2] == '+') ? src_[k + 2] : 0;
      size_t tag_inner = k + 2 + (mod ? 1 : 0);
      if (!is_keyword_tag(tag_inner, "endraw")) continue;
      std::string data = src_.substr(body, k - body);
      bool line_starting = body > 0 && src_[body - 1] == '\n';
      apply_lstrip(data, mod, true, line_starting);
      emit_text(std::move(data), body);
      size_t e = src_.find("%}", tag_inner);
      char end_mod = src_[e - 1] == '-' || src_[e - 1] == '+' ? src_[e - 1] : 0;
      return after_block_end(e + 2, end_mod);
    }
    throw_template_error(pos_of(start), "missing {% endraw %} for {% raw %}");
  }

  size_t lex_tag(size_t start, char kind, size_t i) {
    const bool is_block = kind == '%';
    tokens_.push_back(Token{is_block ? TokenType::BlockBegin : TokenType::VarBegin, {}, 0, 0.0, pos_of(start)});
    std::vector<char> brackets;
    const size_t n = src_.size();
    while (true) {
      while (i < n && is_space(src_[i])) ++i;
      if (i >= n) {
        throw_template_error(pos_of(start),
                             is_block ? "unclosed block tag: missing '%}'" : "unclosed '{{': missing '}}'");
      }
      if (brackets.empty()) {
        const char* close = is_block ? "%}" : "}}";
        char mod = 0;
        size_t at = i;
        if ((src_[i] == '-' || (is_block && src_[i] == '+')) && src_.compare(i + 1, 2, close) == 0) {
          mod = src_[i];
          at = i + 1;
        }
        if (src_.compare(at, 2, close) == 0) {
          tokens_.push_back(Token{is_block ? TokenType::BlockEnd : TokenType::VarEnd, {}, 0, 0.0, pos_of(i)});
          size_t end = at + 2;
          if (is_block) return after_block_end(end, mod);
          if (mod == '-') {
            while (end < n && is_space(src_[end])) ++end;
          }
          return end;
        }
      }
      i = lex_expr_token(i, brackets);
    }
  }

  size_t lex_expr_token(size_t i, std::vector<char>& brackets) {
    const size_t n = src_.size();
    const char c = src_[i];
    const SourcePos pos = pos_of(i);
    if (is_name_start(c) || static_cast<unsigned char>(c) >= 0x80) {
      size_t j = i;
      while (j < n && (is_name_char(src_[j]) || static_cast<unsigned char>(src_[j]) >= 0x80)) ++j;
      tokens_.push_back(Token{TokenType::Name, src_.substr(i, j - i), 0, 0.0, pos});
      return j;
    }
    if (is_digit(c)) return lex_number(i, pos);
    if (c == '\'' || c == '"') return lex_string(i, pos);
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                 ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
    for (const char* op : kOps) {
      size_t len = std::strlen(op);
      if (src_.compare(i, len, op) != 0) continue;
      if (len == 1 && (c == '(' || c == '[' || c == '{')) {
        brackets.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
      } else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
        if (brackets.empty() || brackets.back() != c) throw_template_error(pos, fmt::format("unexpected '{}'", c));
        brackets.pop_back();
      }
      tokens_.push_back(Token{TokenType::Op, op, 0, 0.0, pos});
      return i + len;
    }
    throw_template_error(pos, fmt::format("unexpected character '{}' in tag", c));
  }

  size_t lex_number(size_t i, const SourcePos& pos) {
    const size_t n = src_.size();
    auto digits = [&](size_t j) {
      while (j < n && (is_digit(src_[j]) || (src_[j] == '_' && j + 1 < n && is_digit(src_[j + 1])))) ++j;
      return j;
    };
    size_t j = digits(i);
    bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::Op && tokens_.back().text == ".";
    bool is_float = false;
    if (!after_dot) {
      if (j + 1 < n && src_[j] == '.' && is_digit(src_[j + 1])) {
        j = digits(j + 1);
        is_float = true;
      }
      if (j < n && (src_[j] == 'e' || src_[j] == 'E')) {
        size_t k = j + 1;
        if (k < n && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < n && is_digit(src_[k])) {
          j = digits(k);
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t k = i; k < j; ++k)
      if (src_[k] != '_') text += src_[k];
    Token t{is_float ? TokenType::Float : TokenType::Int, text, 0, 0.0, pos};
    try {
      if (is_float) {
        t.float_value = std::stod(text);
      } else {
        t.int_value = std::stoll(text);
      }
    } catch (const std::exception&) {
      throw_template_error(pos, fmt::format("number '{}' is out of range", text));
    }
    tokens_.push_back(std::move(t));
    return j;
  }

  size_t lex_string(size_t i, const SourcePos& pos) {
    const size_t n = src_.size();
    const char quote = src_[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= n) throw_template_error(pos, "unterminated string literal");
      char c = src_[j];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++j;
        continue;
      }
      if (j + 1 >= n) throw_template_error(pos, "unterminated string literal");
      char e = src_[j + 1];
      j += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (j + len > n) throw_template_error(pos, fmt::format("truncated \\{} escape in string", e));
          uint32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            char h = src_[j + k];
            int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                    : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                                : -1;
            if (d < 0) throw_template_error(pos, fmt::format("bad \\{} escape in string", e));
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF) throw_template_error(pos, "escape is not a valid Unicode code point");
          append_utf8(out, cp);
          j += len;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && j < n && src_[j] >= '0' && src_[j] <= '7'; ++k, ++j) cp = cp * 8 + (src_[j] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';  // Python keeps unknown escapes as written
            out += e;
          }
      }
    }
    tokens_.push_back(Token{TokenType::String, std::move(out), 0, 0.0, pos});
    return j + 1;
  }

  LexerOptions opts_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  mutable size_t cache_line_ = 0, cache_offset_ = 0;
  mutable int cache_col_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& opts) {
  return Lexer(source, opts).run();
}

}  // namespace cypris::jinja
