// Maps the sampler fields of a request body (OpenAI / Aphrodite names, their aliases, and the
// KoboldCpp / ooba spellings SillyTavern sends) into SamplingParams, leniently as clients expect:
// top_k 0 = off, seed < 0 = random, null = default, dry_sequence_breakers as a list or a JSON string
// of one, sampler_order (KoboldCpp's numbering) ignored when it is not a full Aphrodite order,
// dynatemp_range (Kobold) as dynatemp min/max around the temperature, vLLM's bad_words as
// banned_strings. Keys that are not sampler fields are left to the route. Wrong types are
// HttpError 400 naming the field; value ranges are checked afterwards by SamplingParams::validate().
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "engine/request/sampling_params.h"

namespace cypris::server {

struct SamplingDefaults {
  std::optional<int> max_tokens = 16;  // completions: 16; chat: unset (= the rest of the context)
  float temperature = 1.0f;            // Aphrodite's chat default is 0.7
};

// skip: keys this route reads itself (chat reads "logprobs" as a bool, for instance).
SamplingParams sampling_from_json(const nlohmann::json& body, const SamplingDefaults& defaults,
                                  const std::set<std::string>& skip = {});

// Structured output: guided_json / guided_regex / guided_choice / guided_grammar (Lark EBNF, or
// GBNF when it uses "::="), grammar / grammar_string (GBNF), response_format (json_object,
// json_schema) and guided_whitespace_pattern. Falsy values ({}, "", null, response_format text)
// are ignored; guided_choice [] is a 400 (no output is one of no choices). The grammar is compiled here (and cached) so that a bad schema, regex or grammar is an HttpError 400 naming the
// field and the position; two guided fields at once are refused.
GuidedDecodingParams guided_from_json(const nlohmann::json& body);

// The two halves of guided_from_json, for routes that check their cheap fields (sampling
// parameters, the context length) before paying for a compile: the fields alone (field: the one
// that gave the grammar), and the compile (a 400 naming field on bad input; no-op when inactive).
GuidedDecodingParams guided_fields_from_json(const nlohmann::json& body, std::string* field);
void compile_guided(const GuidedDecodingParams& g, const std::string& field);

// A one-line summary for request logging.
std::string summarize_params(const SamplingParams& p);

}  // namespace cypris::server
