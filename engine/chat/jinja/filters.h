// Jinja filters ({{ x | trim }}) and tests ({% if x is defined %}) of the chat-template
// interpreter; the parser resolves them by name (methods.h has the methods of values).
#pragma once

#include <string_view>

#include "engine/chat/jinja/ast.h"

namespace cypris::jinja {

// nullptr when there is no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

}  // namespace cypris::jinja
