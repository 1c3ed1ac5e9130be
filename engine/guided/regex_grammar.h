// Regular expressions as guided-decoding grammars: the subset users send in guided_regex, JSON
// Schema "pattern" and Lark /.../ terminals. Literals and escapes (\d \w \s and negations, \n \t
// \xHH \uHHHH), classes with ranges and negation, ".", groups ((...), (?:...), named), alternation,
// quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same language). The pattern must match
// the whole text; ^ and $ are accepted only where they say that anyway (start and end).
// Backreferences, lookaround, word boundaries, inline flags and Unicode properties are refused by
// name with the position (0-based byte offset into the pattern).
#pragma once

#include <string>
#include <string_view>

#include "engine/guided/grammar.h"

namespace cypris::guided {

struct RegexOptions {
  // Characters are emitted as they appear inside a JSON string: '"', '\' and control characters
  // as their escapes (JSON Schema "pattern" constrains the decoded string).
  bool json_string = false;
  bool dot_all = false;  // "." also matches \n
};

// what: the field for error messages ("guided_regex", "pattern at /properties/id").
ExprPtr regex_to_expr(std::string_view pattern, const std::string& what, RegexOptions opts = {});

// A whole grammar that matches the pattern (guided_regex).
Grammar regex_grammar(std::string_view pattern, const std::string& what = "guided_regex");

// One code point from `ranges`, escaped for a JSON string when json_string.
ExprPtr char_class_expr(const CodepointRanges& ranges, bool json_string);

}  // namespace cypris::guided
