// Parser from Jinja tokens to the syntax tree (ast.h). Operator precedence and statement forms
// follow Jinja2's parser; unknown filters, tests and tags are syntax errors.
#pragma once

#include <memory>
#include <string_view>

#include "engine/chat/jinja/ast.h"
#include "engine/chat/jinja/lexer.h"

namespace cypris::jinja {

// Throws cypris::Error ("chat template: line L, column C: ...") on a syntax error.
std::unique_ptr<Template> parse_template(std::string_view source, const LexerOptions& opts = {});

}  // namespace cypris::jinja
