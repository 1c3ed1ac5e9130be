// Tokenizer for Jinja template source: text, {{ }}, {% %} and {# #} with Jinja's whitespace
// control (`-` and `+` modifiers, trim_blocks, lstrip_blocks) and {% raw %} blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/jinja/value.h"

namespace cypris::jinja {

enum class TokenType { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  TokenType type;
  std::string text;  // Text data, name, decoded string literal or operator
  int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

struct LexerOptions {
  bool trim_blocks = true;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;  // drop spaces and tabs before a block or comment tag at line start
  bool keep_trailing_newline = false;
};

// Throws cypris::Error ("chat template: line L, column C: ...") on malformed source.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& opts = {});

// The "chat template: line L, column C: msg" error every part of the interpreter throws.
[[noreturn]] void throw_template_error(const SourcePos& pos, const std::string& msg);

}  // namespace cypris::jinja
