// The KoboldAI generate schema (what SillyTavern's KoboldAI Classic mode and Kobold Lite send) and
// its mapping onto SamplingParams, as Aphrodite's Kobold routes do it:
// max_length -> max_tokens, rep_pen -> repetition_penalty, typical -> typical_p, eps_cutoff ->
// epsilon_cutoff, stop_sequence -> stop, sampler_seed -> seed, top_k 0 -> off, tfs floored at
// 1e-5, temperature below 1e-5 -> greedy (n=1, top_p=1, top_k off), dynatemp_range -> dynatemp
// min/max around the temperature. Ignored as in Aphrodite 0.6: rep_pen_range, rep_pen_slope,
// sampler_order (KoboldCpp numbering), singleline, use_story/memory/..., quiet. Pure logic.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/request/sampling_params.h"
#include "engine/tokenizer/tokenizer.h"

namespace cypris::server {

struct KoboldRequest {
  std::string prompt;
  std::optional<std::string> genkey;
  int64_t max_context_length = 0;
  int64_t max_length = 0;
  bool use_default_badwordsids = false;
  // KoboldCpp: continue the grammar from the end of the previous generation with the same grammar.
  // Accepted but not carried out: Cypris starts the grammar afresh for every request (KoboldCpp's
  // behaviour with false, its default); the route logs that once when a request asks for true.
  bool grammar_retain_state = false;
  SamplingParams params;
  // The field that gave params.guided: its grammar is not compiled here (the route compiles it
  // after the cheap checks, compile_guided).
  std::string guided_field;
};

// default_max_length: --max-length; default_context: the model's max_model_len. Throws HttpError
// 400 naming the field for a missing prompt, wrong types, or max_length > max_context_length.
KoboldRequest kobold_request_from_json(const nlohmann::json& body, int64_t default_max_length, int64_t default_context);

// Keeps the last max(1, min(max_context_length, model_max_len) - max_length) prompt tokens
// (model_max_len <= 0: no model limit).
std::vector<int32_t> truncate_kobold_prompt(const std::vector<int32_t>& ids, int64_t max_context_length,
                                            int64_t max_length, int64_t model_max_len);

// use_default_badwordsids: every token whose text contains '[' or ']' (except pad), plus EOS.
std::vector<int32_t> kobold_bad_words_ids(const Tokenizer& tok);

}  // namespace cypris::server
