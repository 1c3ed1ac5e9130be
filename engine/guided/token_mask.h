// Per-step token masks for guided decoding, computed the way XGrammar does (our own code):
// for a matcher top node, the tokens the grammar allows depend mostly on the few stack frames above
// it. So for each top we take its first kContextFrames frames as a key, and once per key walk the
// sorted vocabulary (a flattened token trie) with a synthetic stack whose bottom is "any context",
// sorting every token into accepted (consumed inside those frames), rejected (dies inside them, or
// leaves them on a byte that can never follow the frames' rule) or uncertain (leaves them on a byte
// that might follow). Accepted sets are cached per key; at run time only the uncertain tokens are
// checked against the real stack. Stacks shallower than the key are exact (no uncertain tokens).
//
// The cache belongs to one (grammar, vocabulary) pair and is shared by every request that uses the
// same grammar text; it is guarded by a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/guided/matcher.h"
#include "engine/guided/token_vocab.h"

namespace cypris::guided {

inline constexpr int kContextFrames = 4;
// The per-context cache of one grammar (for one vocabulary) holds at most this many bytes; past
// it the cache starts over (entries are recomputed on demand), so a grammar with very many
// contexts costs time, never unbounded memory. A dense entry of Llama 3's 128,256 tokens is 16 KB.
inline constexpr size_t kMaxMaskCacheBytes = 256u << 20;

class TokenMasker {
 public:
  // max_cache_bytes: the per-context cache's bound (tests use small ones).
  TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v,
              size_t max_cache_bytes = kMaxMaskCacheBytes);
  const Grammar& grammar() const { return *g_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }
  const TokenVocab& vocab() const { return *v_; }
  size_t mask_words() const { return (static_cast<size_t>(v_->size) + 31) / 32; }

  // mask: mask_words() words; bit id set = token id allowed in state s (of a matcher over `arena`).
  void fill(StackArena& arena, const MatchState& s, std::span<uint32_t> mask);
  // Every token's bytes run through the matcher: the reference fill() is tested against.
  void fill_brute_force(StackArena& arena, const MatchState& s, std::span<uint32_t> mask) const;

  size_t cached_keys();
  // Bytes held: the grammar, the cached entries and the precomputation arena.
  size_t memory_bytes() const { return grammar_bytes_ + cache_bytes_.load(std::memory_order_relaxed); }
  uint64_t cache_resets() const { return resets_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    bool dense = false;
    std::vector<uint32_t> bits;     // dense: mask_words() words
    std::vector<int32_t> accepted;  // sparse: token ids
    std::vector<int32_t> uncertain; // indices into vocab.sorted, ascending
  };
  std::shared_ptr<const Entry> entry_for(const StackArena& arena, int32_t top, std::string& key);
  std::shared_ptr<const Entry> compute(const std::vector<int32_t>& frames, bool exact);
  static size_t entry_bytes(const std::string& key, const Entry& e);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocab> v_;
  size_t grammar_bytes_ = 0;
  size_t max_cache_bytes_ = kMaxMaskCacheBytes;
  std::mutex mu_;
  StackArena pre_arena_;
  // Shared pointers: fill() uses an entry outside the lock while another thread may reset the cache.
  std::unordered_map<std::string, std::shared_ptr<const Entry>> cache_;
  std::atomic<size_t> cache_bytes_{0};
  std::atomic<uint64_t> resets_{0};
};

}  // namespace cypris::guided
