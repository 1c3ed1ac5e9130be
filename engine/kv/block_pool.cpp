// BlockPool: ref counts, an intrusive doubly linked free list (O(1) touch/free/evict) and the
// hash -> block map of the prefix cache.
#include "engine/kv/block_pool.h"

#include <algorithm>
#include <stdexcept>

#include "engine/common/error.h"

namespace cypris {

namespace {

// splitmix64 finaliser: cheap, and every input bit affects every output bit.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> token_ids, uint64_t extra_key) {
  uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ extra_key);
  for (int32_t t : token_ids) h = mix64(h + 0x9e3779b97f4a7c15ull + uint64_t(uint32_t(t)));
  return mix64(h ^ uint64_t(token_ids.size()));
}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching)
    : num_blocks_(num_blocks), block_size_(block_size), enable_caching_(enable_caching) {
  CYPRIS_CHECK(num_blocks >= 0, "number of KV-cache blocks must be >= 0, got {}", num_blocks);
  CYPRIS_CHECK(block_size >= 1, "KV-cache block size must be >= 1, got {}", block_size);
  blocks_.resize(size_t(num_blocks));
  if (enable_caching_) cached_tokens_.resize(size_t(num_blocks) * size_t(block_size));
  // Initially the free list is in id order, so fresh allocations hand out 0, 1, 2, ...
  for (int32_t i = 0; i < num_blocks; ++i) push_free_tail(i);
}

void BlockPool::push_free_tail(int32_t id) {
  Block& b = blocks_[size_t(id)];
  b.prev = tail_;
  b.next = -1;
  if (tail_ >= 0)
    blocks_[size_t(tail_)].next = id;
  else
    head_ = id;
  tail_ = id;
  b.in_free_list = true;
  ++num_free_;
}

void BlockPool::unlink_free(int32_t id) {
  Block& b = blocks_[size_t(id)];
  if (b.prev >= 0)
    blocks_[size_t(b.prev)].next = b.next;
  else
    head_ = b.next;
  if (b.next >= 0)
    blocks_[size_t(b.next)].prev = b.prev;
  else
    tail_ = b.prev;
  b.prev = b.next = -1;
  b.in_free_list = false;
  --num_free_;
}

void BlockPool::drop_hash(int32_t id) {
  Block& b = blocks_[size_t(id)];
  if (!b.has_hash) return;
  auto it = cached_.find(b.hash);
  if (it != cached_.end() && it->second == id) cached_.erase(it);
  b.has_hash = false;
}

std::optional<std::vector<int32_t>> BlockPool::allocate(int32_t n) {
  if (n < 0 || n > num_free_) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    int32_t id = head_;
    unlink_free(id);
    drop_hash(id);  // lazy eviction: the cached prefix in this block is gone from now on
    blocks_[size_t(id)].ref_count = 1;
    ++blocks_[size_t(id)].generation;
    out.push_back(id);
  }
  return out;
}

void BlockPool::touch(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_[size_t(id)];
    if (b.ref_count == 0) {
      if (!b.in_free_list) throw std::logic_error("BlockPool::touch: free block not in the free list");
      unlink_free(id);
    }
    ++b.ref_count;
  }
}

void BlockPool::free(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_[size_t(id)];
    if (b.ref_count <= 0) throw std::logic_error("BlockPool::free: block freed more often than referenced");
    if (--b.ref_count == 0) push_free_tail(id);
  }
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> token_ids,
                                         uint64_t extra_key) const {
  if (!enable_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  const Block& b = blocks_[size_t(it->second)];
  if (b.parent_hash != parent_hash || b.extra_key != extra_key || int32_t(token_ids.size()) != block_size_)
    return std::nullopt;
  const int32_t* stored = cached_tokens_.data() + size_t(it->second) * size_t(block_size_);
  if (!std::equal(token_ids.begin(), token_ids.end(), stored)) return std::nullopt;
  return it->second;
}

bool BlockPool::cache_block(int32_t block_id, uint64_t hash, uint64_t parent_hash, std::span<const int32_t> token_ids,
                            uint64_t extra_key) {
  if (!enable_caching_) return false;
  Block& b = blocks_[size_t(block_id)];
  if (b.has_hash || int32_t(token_ids.size()) != block_size_) return false;
  if (cached_.count(hash)) return false;  // an identical block is cached already; this one stays private
  b.has_hash = true;
  b.hash = hash;
  b.parent_hash = parent_hash;
  b.extra_key = extra_key;
  std::copy(token_ids.begin(), token_ids.end(), cached_tokens_.begin() + ptrdiff_t(block_id) * block_size_);
  cached_.emplace(hash, block_id);
  return true;
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_ != num_blocks_) return false;
  for (auto& b : blocks_) b.has_hash = false;
  cached_.clear();
  return true;
}

std::optional<uint64_t> BlockPool::block_hash(int32_t block_id) const {
  const Block& b = blocks_[size_t(block_id)];
  if (!b.has_hash) return std::nullopt;
  return b.hash;
}

std::vector<int32_t> BlockPool::free_list() const {
  std::vector<int32_t> out;
  out.reserve(size_t(num_free_));
  for (int32_t id = head_; id >= 0; id = blocks_[size_t(id)].next) out.push_back(id);
  return out;
}

}  // namespace cypris
