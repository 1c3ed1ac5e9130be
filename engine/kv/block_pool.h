// BlockPool: the physical KV-cache blocks of one device (GPU cache or the CPU swap pool) with
// reference counts, a free list and the prefix-cache map (block hash -> block).
//
// Design (vLLM v1 block_pool.py): a block whose ref count drops to 0 goes to the TAIL of the free
// list but keeps its hash, so a later request with the same prefix can take it back
// ("touch"); allocation pops from the HEAD, i.e. the least recently freed block, and only then
// drops its hash (lazy LRU eviction). Cached-but-free blocks therefore count as free.
// Pure logic: no device memory here, only ids.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace cypris {

// Chained hash of one full block: parent block's hash, the block's token ids and an extra key
// (LoRA id / cache salt). kNoParentHash seeds the first block.
inline constexpr uint64_t kNoParentHash = 0x5bd1e9955bd1e995ull;
uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> token_ids, uint64_t extra_key);

class BlockPool {
 public:
  // block_size is only used to keep the token ids of cached blocks, which lookups compare so
  // that a 64-bit hash collision can never hand out the wrong KV.
  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  bool caching_enabled() const { return enable_caching_; }
  // Blocks with ref count 0, including cached ones that can be evicted.
  int32_t num_free_blocks() const { return num_free_; }
  int32_t num_used_blocks() const { return num_blocks_ - num_free_; }
  // Fraction of blocks referenced by some request (vLLM's "KV cache usage").
  double usage() const { return num_blocks_ == 0 ? 0.0 : double(num_blocks_ - num_free_) / double(num_blocks_); }

  // n blocks with ref count 1, taken from the LRU end of the free list (evicting their cached
  // hashes); nullopt (and no change) when fewer than n are free.
  std::optional<std::vector<int32_t>> allocate(int32_t n);
  // Take a reference on blocks found by lookup(); a free cached block leaves the free list.
  void touch(std::span<const int32_t> block_ids);
  // Drop one reference each. Pass blocks in eviction order: the first one freed is evicted first.
  void free(std::span<const int32_t> block_ids);

  // Prefix cache. lookup() returns the cached block with this hash whose parent hash, tokens and
  // extra key match exactly, or nullopt.
  std::optional<int32_t> lookup(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> token_ids,
                                uint64_t extra_key) const;
  // Register a full, computed block. Returns false (nothing changes) when caching is off, the
  // block already has a hash, or another block already holds this hash.
  bool cache_block(int32_t block_id, uint64_t hash, uint64_t parent_hash, std::span<const int32_t> token_ids,
                   uint64_t extra_key);
  int32_t num_cached_blocks() const { return int32_t(cached_.size()); }
  // Drop every cached hash (the blocks themselves stay where they are). For weight reloads and
  // LoRA changes; returns false while any block is still referenced.
  bool reset_prefix_cache();

  int32_t ref_count(int32_t block_id) const { return blocks_[size_t(block_id)].ref_count; }
  bool is_cached(int32_t block_id) const { return blocks_[size_t(block_id)].has_hash; }
  std::optional<uint64_t> block_hash(int32_t block_id) const;
  // How many times the block was handed out by allocate(). A block whose count has not changed since
  // some moment still holds the KV written into it before then (nothing writes into a block its
  // owner let go of, until allocate() hands it out again): --context-shift's reuse across requests
  // checks a finished sequence's blocks with it.
  uint32_t generation(int32_t block_id) const { return blocks_[size_t(block_id)].generation; }
  // Free list from LRU (next to be evicted) to MRU. For tests and debugging.
  std::vector<int32_t> free_list() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    uint32_t generation = 0;
    bool has_hash = false;
    bool in_free_list = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    uint64_t extra_key = 0;
    int32_t prev = -1;  // free-list links; -1 = none
    int32_t next = -1;
  };

  void push_free_tail(int32_t id);
  void unlink_free(int32_t id);
  void drop_hash(int32_t id);

  int32_t num_blocks_;
  int32_t block_size_;
  bool enable_caching_;
  int32_t num_free_ = 0;
  int32_t head_ = -1;  // LRU end
  int32_t tail_ = -1;  // MRU end
  std::vector<Block> blocks_;
  std::vector<int32_t> cached_tokens_;  // [num_blocks * block_size], valid where has_hash
  std::unordered_map<uint64_t, int32_t> cached_;
};

}  // namespace cypris
