// Guided decoding for the engine: a request's GuidedDecodingParams compiled into a Grammar (cached
// by its text in a bounded LRU shared by the server, which compiles to answer 400 on bad input, and
// the engine), a TokenMasker per grammar for the model's vocabulary (cached likewise), and the
// per-sequence GuidedMatcher that the engine advances with each accepted token, rolls back on
// banned-string rewinds and copies for beam forks.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request/sampling_params.h"
#include "engine/guided/token_mask.h"

namespace cypris::guided {

// The caches' byte bounds (besides their entry counts: 64 grammars, 32 maskers): compiled grammars
// kept for the server and engine, and the engine's maskers (grammar + per-context mask cache).
// An entry in use by a request stays alive until the request ends, whatever the cache drops.
inline constexpr size_t kMaxGrammarCacheBytes = 256u << 20;
inline constexpr size_t kMaxMaskerCacheBytes = 1024u << 20;

// Compiles beyond this many at once wait (more on machines with over 8 cores: a quarter of them).
inline constexpr int kMaxConcurrentCompiles = 2;

// Compiles (or finds in the process-wide cache) the grammar of a request. Throws cypris::Error with
// the field name and position for bad schemas, regexes and grammars, and for grammars past the
// size limits or the compile step budget (grammar.h).
std::shared_ptr<const Grammar> compile(const GuidedDecodingParams& p);

// The grammar-only part of GuidedDecodingParams as a name for logs ("json_schema", "regex", ...).
const char* kind_name(GuidedKind k);

class GuidedMatcher {
 public:
  explicit GuidedMatcher(std::shared_ptr<TokenMasker> masker);
  // Beam forks and n > 1 copies: shares the grammar and arena, copies the state history.
  std::unique_ptr<GuidedMatcher> clone() const { return std::make_unique<GuidedMatcher>(*this); }
  GuidedMatcher(const GuidedMatcher&) = default;

  size_t mask_words() const { return masker_->mask_words(); }
  void fill_mask(std::span<uint32_t> mask);
  // Advances by the token. False when the grammar does not allow it (the state is unchanged).
  bool accept(int32_t token);
  // Drops the last n accepted tokens (banned-string rewinds).
  void rollback(size_t n);
  size_t num_accepted() const { return history_.size() - 1; }
  // The grammar is complete and nothing may follow: the sequence should stop.
  bool terminated() const { return history_.back().tops.empty() && history_.back().can_end; }
  bool can_end() const { return history_.back().can_end; }
  const TokenMasker& masker() const { return *masker_; }

 private:
  friend void check_token_restrictions(const GuidedMatcher& m, const SamplingParams& p);
  std::shared_ptr<TokenMasker> masker_;
  std::shared_ptr<StackArena> arena_;
  std::vector<MatchState> history_;  // [0]: before any token
};

// A request's own token restrictions (allowed_token_ids, custom_token_bans) against its grammar:
// throws cypris::Error naming both when no output can satisfy them (every token the grammar allows
// is forbidden, now or on every path a short search finds), instead of a silent free-text answer.
// The search looks at no more than kMaxSatisfiabilityStates states; a grammar it cannot decide in
// that many is accepted. No-op without restrictions.
inline constexpr int kMaxSatisfiabilityStates = 32;
void check_token_restrictions(const GuidedMatcher& m, const SamplingParams& p);

// Engine-side: the model's vocabulary and the maskers of recent grammars.
class GuidedDecoder {
 public:
  explicit GuidedDecoder(std::shared_ptr<const TokenVocab> vocab, size_t capacity = 32);
  const TokenVocab& vocab() const { return *vocab_; }
  std::unique_ptr<GuidedMatcher> make_matcher(const GuidedDecodingParams& p);

 private:
  std::shared_ptr<const TokenVocab> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<TokenMasker>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace cypris::guided
