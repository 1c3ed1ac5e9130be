// Speculative decoding settings, read from the --speculative-* options: which proposer, how many
// tokens, how drafts are accepted, when it is off. Throws cypris::Error naming the flag for settings
// Cypris cannot run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/config/engine_config.h"
#include "engine/spec/ngram_proposer.h"

namespace cypris {

enum class SpecAcceptance {
  Rejection,  // rejection_sampler: the target's distribution exactly
  Typical,    // typical_acceptance_sampler: a draft token is kept when the target finds it probable enough
};

struct SpecDecodeConfig {
  // The proposer: prompt lookup (draft_model empty) or a draft model (its path or Hub id).
  NgramProposerConfig ngram;  // num_tokens is --num-speculative-tokens for either proposer
  std::string draft_model;
  // The draft's context limit (--speculative-max-model-len): a sequence longer than this gets no drafts.
  std::optional<int64_t> draft_max_model_len;
  std::optional<std::string> draft_quantization;  // --speculative-model-quantization
  // The draft's tensor-parallel size (--speculative-draft-tensor-parallel-size): 1 (unsharded) or the
  // target's --tensor-parallel-size; unset: the target's (vLLM's default). draft_tp_given says the
  // flag was there (under MPI processes an unset size falls back to 1, a given one > 1 is refused).
  int32_t draft_tp = 1;
  bool draft_tp_given = false;
  SpecAcceptance acceptance = SpecAcceptance::Rejection;
  // Typical acceptance (vLLM's defaults): keep a draft token x when p(x) > min(threshold, alpha * exp(-H(p))).
  double typical_threshold = 0.09;
  double typical_alpha = 0.3;
  // No speculation in a step with more running requests than this (--speculative-disable-by-batch-size).
  std::optional<int64_t> disable_by_batch_size;
  // KV slots a decode with drafts reserves after its last token (--num-lookahead-slots, at least
  // num_tokens; unset or 0: num_tokens).
  int32_t lookahead_slots = 0;
  bool draft_model_proposer() const { return !draft_model.empty(); }
};

// nullopt without --speculative-model. "[ngram]" needs --num-speculative-tokens and
// --ngram-prompt-lookup-max (--ngram-prompt-lookup-min defaults to 1), like Aphrodite; a draft model
// needs --num-speculative-tokens and refuses the n-gram flags. Medusa, EAGLE and MLP speculators are
// refused by name, and so is a draft tensor-parallel size other than 1 and the target's (or other
// than 1 with --distributed-executor-backend mpi, whose processes hold only the target's shards, or
// with "[ngram]"). --num-lookahead-slots needs --speculative-model and, given, at least
// --num-speculative-tokens.
std::optional<SpecDecodeConfig> spec_decode_config(const EngineConfig& cfg);

}  // namespace cypris
