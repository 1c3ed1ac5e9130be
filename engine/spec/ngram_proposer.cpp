// NgramProposer: a backwards scan for the latest earlier occurrence of the sequence's suffix.
#include "engine/spec/ngram_proposer.h"

#include <algorithm>

#include "engine/common/error.h"

namespace cypris {

NgramProposer::NgramProposer(NgramProposerConfig config) : config_(config) {
  CYPRIS_CHECK(config_.min_n >= 1, "--ngram-prompt-lookup-min must be at least 1, got {}", config_.min_n);
  CYPRIS_CHECK(config_.max_n >= config_.min_n,
               "--ngram-prompt-lookup-max ({}) must be at least --ngram-prompt-lookup-min ({})", config_.max_n,
               config_.min_n);
  CYPRIS_CHECK(config_.num_tokens >= 1, "--num-speculative-tokens must be at least 1, got {}", config_.num_tokens);
}

std::vector<int32_t> NgramProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens) const {
  const int64_t len = static_cast<int64_t>(tokens.size());
  const int64_t want = std::min<int64_t>(config_.num_tokens, max_tokens);
  if (want <= 0) return {};
  for (int64_t n = std::min<int64_t>(config_.max_n, len - 1); n >= config_.min_n; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Latest start i < len - n whose n tokens equal the suffix; what follows it is the guess.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      // What followed the match, continued past the end by the guess itself (an overlapping copy,
      // as in LZ77): a periodic tail "x y x y" yields "x y x y ..." rather than stopping at the end.
      std::vector<int32_t> out;
      out.reserve(static_cast<size_t>(want));
      for (int64_t j = i + n; static_cast<int64_t>(out.size()) < want; ++j)
        out.push_back(j < len ? tokens[static_cast<size_t>(j)] : out[static_cast<size_t>(j - len)]);
      return out;
    }
  }
  return {};
}

}  // namespace cypris
