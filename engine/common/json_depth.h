// How deeply a JSON text nests its arrays and objects, found by a linear scan without parsing.
// Parsing is iterative, but copying, comparing and printing a parsed value recurse once per level;
// a body or a schema nested deeper than the limit is refused before any of that runs.
#pragma once

#include <cstddef>
#include <string_view>

namespace cypris {

// The nesting limit of request bodies and of JSON given as a string (guided_json): far above any
// real request, low enough that the recursive operations on the value stay shallow.
inline constexpr size_t kMaxJsonNesting = 1024;

// The deepest nesting of '[' and '{' outside strings, counting stops once above `stop_above`
// (the text need not be valid JSON: the parser reports its own errors).
size_t json_nesting(std::string_view text, size_t stop_above = kMaxJsonNesting);

}  // namespace cypris
