// Maps the sampler fields of a request body (OpenAI / Aphrodite names, their aliases, and the
// KoboldCpp / ooba spellings SillyTavern sends) into SamplingParams, leniently as clients expect:
// top_k 0 = off, seed < 0 = random, null = default, dry_sequence_breakers as a list or a JSON string
// of one, sampler_order (KoboldCpp's numbering) ignored when it is not a full Aphrodite order.
// Unknown keys are ignored. Wrong types are HttpError 400 naming the field; value ranges are
// checked afterwards by SamplingParams::validate().
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

// Guided decoding is not implemented yet: falsy values ({}, "", null, [], response_format text)
// are ignored, anything else is HttpError 400 naming the field.
void reject_guided_decoding(const nlohmann::json& body);

// A one-line summary for request logging.
std::string summarize_params(const SamplingParams& p);

}  // namespace cypris::server
