// Methods of str, dict and list values (x.strip(), d.items()) and Python-compatible JSON output.
// The interpreter reaches the methods only through the table install_globals (globals.h) gives it,
// so this library builds on the interpreter without the interpreter depending on it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/chat/jinja/ast.h"

namespace cypris::jinja {

// Calls method `name` of `self` (str, dict or list methods Python templates use); nullopt when
// `self` has no such method.
std::optional<Value> call_method(Interpreter& interp, const Value& self, std::string_view name, CallArgs& args,
                                 const SourcePos& pos);
bool has_method(const Value& self, std::string_view name);

// The Python-compatible JSON text of a value (transformers' tojson: json.dumps with
// ensure_ascii=False; indent < 0 means no indent).
std::string to_json(const Value& v, int indent, bool ensure_ascii, bool sort_keys, const SourcePos& pos,
                    std::string_view item_sep = ", ", std::string_view key_sep = ": ");

}  // namespace cypris::jinja
