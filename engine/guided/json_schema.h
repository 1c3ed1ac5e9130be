// JSON Schema as a guided-decoding grammar (guided_json, response_format json_schema / json_object).
//
// Covered: type (and type lists), enum, const, properties / required / additionalProperties,
// items / minItems / maxItems, anyOf / oneOf (oneOf is generated as anyOf, like XGrammar; branches
// that overlap may give text that matches two), allOf (merged), $ref / $defs / definitions
// (recursive, local "#..." pointers), string pattern / format (date, time, date-time, uuid, email,
// ipv4) / minLength / maxLength, integer minimum / maximum / exclusive bounds, number minimum /
// maximum with integer-valued bounds. A number the schema does not bound has at most 16 digits in
// its integer part, fraction and exponent each (a bound with more digits widens that); the default
// whitespace between tokens is none, one space, or one newline plus at most 20 spaces/tabs of
// indentation (guided_whitespace_pattern replaces it). Properties come out in the schema's key order; properties not
// listed are not generated unless additionalProperties allows them. Annotations (title,
// description, default, examples, ...) are ignored. Every other keyword is refused with an error
// that names it and its location (a JSON pointer), never silently dropped.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/guided/grammar.h"

namespace cypris::guided {

struct JsonSchemaOptions {
  std::string what = "guided_json";             // field name for error messages
  std::optional<std::string> whitespace_pattern;  // guided_whitespace_pattern (a regex); default ( |\n[ \t]{0,20})?
};

Grammar json_schema_grammar(const nlohmann::json& schema, const JsonSchemaOptions& opts = {});
// Any JSON object (response_format json_object).
Grammar json_object_grammar(const JsonSchemaOptions& opts = {});

}  // namespace cypris::guided
