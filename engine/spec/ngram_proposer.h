// Prompt lookup (n-gram) proposals for speculative decoding (--speculative-model "[ngram]"): the
// tokens that followed the most recent earlier occurrence of the sequence's last n tokens, trying
// n from --ngram-prompt-lookup-max down to --ngram-prompt-lookup-min. Pure logic: a sequence that
// repeats itself (rewriting, continuing a list, quoting the prompt) gets guesses for free, one that
// never repeats gets none and decodes as without speculation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cypris {

struct NgramProposerConfig {
  int32_t min_n = 1;       // shortest suffix looked up
  int32_t max_n = 1;       // longest suffix looked up (tried first)
  int32_t num_tokens = 1;  // at most this many tokens proposed (--num-speculative-tokens)
};

class NgramProposer {
 public:
  // Throws cypris::Error naming the flag when a size is out of range.
  explicit NgramProposer(NgramProposerConfig config);
  const NgramProposerConfig& config() const { return config_; }

  // tokens: the sequence so far (prompt then output). min(config.num_tokens, max_tokens) tokens
  // that followed the latest earlier match of its longest matching suffix (continued by the guess
  // itself where the match runs into the end, so a periodic tail proposes its period again); empty
  // when no suffix of min_n..max_n tokens occurred before.
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t max_tokens) const;

 private:
  NgramProposerConfig config_;
};

}  // namespace cypris
