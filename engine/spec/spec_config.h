// Speculative decoding settings, read from the --speculative-* options: which proposer, how many
// tokens, when it is off. Throws cypris::Error naming the flag for settings Cypris cannot run.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/config/engine_config.h"
#include "engine/spec/ngram_proposer.h"

namespace cypris {

struct SpecDecodeConfig {
  NgramProposerConfig ngram;  // the one proposer so far: prompt lookup
  // No speculation in a step with more running requests than this (--speculative-disable-by-batch-size).
  std::optional<int64_t> disable_by_batch_size;
};

// nullopt without --speculative-model. "[ngram]" needs --num-speculative-tokens and
// --ngram-prompt-lookup-max (--ngram-prompt-lookup-min defaults to 1), like Aphrodite. A draft
// model path, Medusa, EAGLE and MLP speculators are refused by name.
std::optional<SpecDecodeConfig> spec_decode_config(const EngineConfig& cfg);

}  // namespace cypris
