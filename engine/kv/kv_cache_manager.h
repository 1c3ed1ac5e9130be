// KvCacheManager: each request's block table over the GPU BlockPool, prefix-cache lookups,
// fork with copy-on-write, and swap to/from a CPU block pool. Pure logic: it hands out block ids
// and reports the block copies the model runner must perform; it never touches device memory.
//
// Accounting follows vLLM v1 (kv_cache_manager.py): a step computes tokens
// [num_computed_tokens, num_computed_tokens + num_new_tokens) of a request, and allocate_slots()
// makes sure blocks exist for them. The manager asks before it changes anything: "does not fit"
// is a nullopt / false, never an exception.
#pragma once

#include <climits>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request/request.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_reuse.h"

namespace cypris {

// The block sizes the paged-attention kernels are built for (Aphrodite's --block-size choices).
inline constexpr int32_t kAllowedBlockSizes[] = {8, 16, 32};

struct KvCacheConfig {
  int32_t block_size = 16;             // --block-size
  int32_t num_gpu_blocks = 0;          // from memory profiling or --num-gpu-blocks-override
  int32_t num_cpu_blocks = 0;          // from --swap-space; 0 = no swapping
  bool enable_prefix_caching = false;  // --enable-prefix-caching
  // Throws cypris::Error naming the flag and what is allowed.
  void validate() const;
};

// Result of a prefix-cache lookup: leading full blocks whose KV is already in the cache.
struct ComputedBlocks {
  std::vector<int32_t> block_ids;
  int32_t num_tokens = 0;  // block_ids.size() * block_size
};

// One block copy the runner performs before the step's forward pass: src -> dst. For swaps, src
// and dst are in different pools (GPU -> CPU for swap-out, CPU -> GPU for swap-in).
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

// --context-shift by rotation: one cached token moves from slot src to slot dst (slot = block *
// block_size + offset) and from position old_pos to new_pos; the runner rotates its key by the
// angle between the two positions.
struct KvSlotMove {
  int64_t src = 0;
  int64_t dst = 0;
  int32_t old_pos = 0;
  int32_t new_pos = 0;
  bool operator==(const KvSlotMove&) const = default;
};

// --context-shift across requests: a waiting request's positions [start, end) take their KV from a
// finished sequence's cache (KvCacheManager::find_reuse): [start, same_end) from the same positions,
// [same_end, end) from positions run_src, run_src + 1, ... (keys rotated down by distance()).
struct KvReuse {
  int32_t start = 0;  // the prefix-cache hit (if any) ends here
  int32_t same_end = 0;
  int32_t run_src = 0;
  int32_t end = 0;
  // The KV of positions before exact_end is what a prefill of the request's tokens gives (copied
  // from the same positions of a sequence that computed them); later blocks are never cached.
  int32_t exact_end = 0;
  int32_t source = 0;  // which remembered sequence (most recent first)
  int32_t num_tokens() const { return end - start; }
  int32_t num_moved() const { return end - same_end; }  // tokens whose keys are rotated
  int32_t distance() const { return run_src - same_end; }
};

struct SlotAllocation {
  std::vector<int32_t> new_block_ids;  // appended to the request's block table
  std::vector<BlockCopy> copies;       // copy-on-write of shared, partially filled blocks
};

struct PrefixCacheStats {
  int64_t requests = 0;  // admissions that looked up the cache
  int64_t queries = 0;   // prompt tokens looked up
  int64_t hits = 0;      // of those, tokens served from the cache
  double hit_rate() const { return queries == 0 ? 0.0 : double(hits) / double(queries); }
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);  // validates config

  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return gpu_.caching_enabled(); }
  int32_t num_gpu_blocks() const { return gpu_.num_blocks(); }
  int32_t num_cpu_blocks() const { return cpu_.num_blocks(); }
  int32_t num_free_blocks() const { return gpu_.num_free_blocks(); }
  int32_t num_free_cpu_blocks() const { return cpu_.num_free_blocks(); }
  double usage() const { return gpu_.usage(); }
  double cpu_usage() const { return cpu_.usage(); }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  const BlockPool& gpu_pool() const { return gpu_; }
  const BlockPool& cpu_pool() const { return cpu_; }
  static int32_t blocks_for_tokens(int32_t num_tokens, int32_t block_size) {
    return (num_tokens + block_size - 1) / block_size;
  }

  // Prefix-cache hit for a request that holds no blocks: the longest chain of cached full blocks
  // matching its tokens, never covering the last token (at least one token must be computed to
  // get logits). Empty when prefix caching is off. Call allocate_slots() right after it, before
  // anything else allocates, or the blocks may have been evicted.
  ComputedBlocks get_computed_blocks(Request& request);

  // Free GPU blocks allocate_slots() would consume (new blocks, copy-on-write blocks, and cached
  // free blocks that a prefix hit takes back).
  int32_t num_blocks_needed(const Request& request, int32_t num_new_tokens, const ComputedBlocks* computed = nullptr,
                            int32_t num_lookahead_tokens = 0) const;
  bool can_allocate(const Request& request, int32_t num_new_tokens, const ComputedBlocks* computed = nullptr,
                    int32_t num_lookahead_tokens = 0) const {
    return num_blocks_needed(request, num_new_tokens, computed, num_lookahead_tokens) <= gpu_.num_free_blocks();
  }
  // Make room for num_new_tokens (+ lookahead slots for speculative tokens) after the request's
  // computed tokens. With `computed` (only for a request without blocks), its blocks become the
  // head of the table and the new tokens start after them; the caller then sets the request's
  // num_computed_tokens to computed->num_tokens. nullopt and no change when it does not fit.
  std::optional<SlotAllocation> allocate_slots(Request& request, int32_t num_new_tokens,
                                               const ComputedBlocks* computed = nullptr,
                                               int32_t num_lookahead_tokens = 0);

  // Offer the request's full, computed blocks to the prefix cache. Call after a step advanced
  // num_computed_tokens (the KV is written then); free() and swap_out() call it too.
  void cache_computed_blocks(Request& request);

  // Release the request's blocks (GPU or CPU). Full hashed GPU blocks stay cached for reuse.
  void free(Request& request);

  // banned_strings rewind: keep only the request's first num_tokens_to_keep tokens of KV, a multiple
  // of the block size. Later blocks go back to the pool; the kept ones are never written into
  // again, so a block shared with another request or the prefix cache stays intact (the rewound
  // tokens are recomputed into fresh blocks). The request must hold GPU blocks.
  void truncate(Request& request, int32_t num_tokens_to_keep);

  // --context-shift by rotation: the request's blocks from block index `first_block` on hold KV that a
  // fresh prefill of their tokens would not give (keys rotated, values computed with the dropped
  // tokens in view), so they are never offered to the prefix cache, as long as the request keeps its
  // blocks (a recompute after preemption starts clean).
  void stop_caching_from(Request& request, int32_t first_block);

  // --context-shift across requests (KoboldCpp's ContextShift for chat frontends that trim old
  // messages; kv_reuse.h). With num_sequences > 0 the manager remembers that many finished sequences
  // (tokens and block ids, not the blocks: they stay free and evictable, and a block handed out again
  // since is no longer read, BlockPool::generation).
  void enable_reuse(int32_t num_sequences) { max_remembered_ = std::max(num_sequences, 0); }
  // Call before free(): the request's computed tokens and its blocks become the newest remembered
  // sequence (the oldest beyond the limit is forgotten). Nothing for a swapped-out request.
  void remember_sequence(const Request& request);
  // For a waiting request whose first `start` tokens have KV (a prefix hit): the longest reuse any
  // remembered sequence with the same cache salt offers (kv_reuse.h), never its last token; nullopt
  // when none does. Call allocate_slots() (with num_new_tokens covering [start, end)) and then
  // reuse_kv() right after, before anything else allocates or frees.
  std::optional<KvReuse> find_reuse(const Request& request, int32_t start) const;
  // After allocate_slots(): the slot moves that copy the reused KV into the request's blocks (the
  // source blocks are only read, so other holders of them are unaffected); blocks from exact_end on
  // are kept out of the prefix cache. The runner must perform the moves before anything else of
  // the step writes (Backend::move_kv_slots gathers every source first).
  std::vector<KvSlotMove> reuse_kv(Request& request, const KvReuse& reuse);
  int32_t num_remembered_sequences() const { return int32_t(remembered_.size()); }

  // Speculative decoding: after a step rolled num_computed_tokens back over rejected drafts, the
  // blocks past the one holding the last computed token go back to the pool (never a hashed
  // block: only blocks of computed tokens are hashed). The next step allocates again as needed.
  void release_unused_blocks(Request& request);

  // The child shares all of the parent's blocks (ref counts +1). The first of them to write into
  // a shared partially filled block gets a private copy (SlotAllocation::copies).
  void fork(const Request& parent, const Request& child);

  // Swap the request's computed blocks to the CPU pool; returns the (gpu -> cpu) copies, nullopt
  // when the CPU pool lacks room (nothing changes then).
  bool can_swap_out(const Request& request) const;
  std::optional<std::vector<BlockCopy>> swap_out(Request& request);
  // Bring a swapped request back, with room for num_new_tokens more; returns (cpu -> gpu) copies.
  bool can_swap_in(const Request& request, int32_t num_new_tokens) const;
  std::optional<std::vector<BlockCopy>> swap_in(Request& request, int32_t num_new_tokens);

  bool has_blocks(const std::string& request_id) const { return tables_.count(request_id) != 0; }
  bool is_swapped(const std::string& request_id) const;
  // The request's block table (GPU ids, or CPU ids while swapped); empty when it has none.
  std::span<const int32_t> block_ids(const std::string& request_id) const;
  // Every (request id, table) pair: for invariant checks in tests.
  const auto& tables() const { return tables_; }

  // Drop all cached prefixes (after a weight or adapter change). False while blocks are in use.
  bool reset_prefix_cache() { return gpu_.reset_prefix_cache(); }

 private:
  struct Table {
    std::vector<int32_t> blocks;
    int32_t num_hashed = 0;  // leading blocks already offered to the prefix cache
    int32_t cache_limit = INT32_MAX;  // blocks from this index on are never offered (stop_caching_from)
    bool on_cpu = false;
  };
  struct Remembered {
    std::vector<int32_t> tokens;  // those with KV
    std::vector<int32_t> blocks;
    std::vector<uint32_t> generations;  // of each block when remembered
    int32_t exact = 0;  // KV of tokens before this is a prefill's (not rotated)
    uint64_t cache_salt = 0;
  };
  // Leading tokens of `r` whose blocks still hold its KV.
  int32_t num_valid_tokens(const Remembered& r) const;
  // Make sure request.block_hashes() covers its first n full blocks.
  void ensure_hashes(Request& request, int32_t n) const;
  uint64_t parent_hash(const Request& request, int32_t block_index) const;

  int32_t block_size_;
  BlockPool gpu_;
  BlockPool cpu_;
  std::unordered_map<std::string, Table> tables_;
  PrefixCacheStats stats_;
  std::deque<Remembered> remembered_;  // most recent first
  int32_t max_remembered_ = 0;
};

}  // namespace cypris
