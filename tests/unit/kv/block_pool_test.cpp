// BlockPool: ref counts, free list order, lazy LRU eviction of cached blocks, hash lookups.
#include "engine/kv/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace cypris {
namespace {

std::vector<int32_t> block_tokens(int32_t first, int32_t n = 4) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(BlockPool, AllocateUntilFullThenRefuses) {
  BlockPool pool(4, 4, false);
  auto a = pool.allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_FALSE(pool.allocate(2)) << "only one block is free";
  EXPECT_EQ(pool.num_free_blocks(), 1) << "a refused allocation changes nothing";
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  for (int32_t id : *a) EXPECT_EQ(pool.ref_count(id), 1);
  pool.free(*a);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
}

TEST(BlockPool, SharedBlockIsFreeOnlyAfterLastReference) {
  BlockPool pool(2, 4, false);
  auto a = *pool.allocate(1);
  pool.touch(a);  // a second owner
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.free(a);
  EXPECT_EQ(pool.num_free_blocks(), 1) << "still referenced once";
  pool.free(a);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_THROW(pool.free(a), std::logic_error) << "double free is a bug, not silently ignored";
}

TEST(BlockPool, CachedFreeBlocksAreEvictedLeastRecentlyFreedFirst) {
  BlockPool pool(4, 4, true);
  auto ids = *pool.allocate(3);  // 0, 1, 2
  uint64_t h[3];
  for (int i = 0; i < 3; ++i) {
    h[i] = hash_block_tokens(kNoParentHash, block_tokens(10 * i), 0);
    ASSERT_TRUE(pool.cache_block(ids[size_t(i)], h[i], kNoParentHash, block_tokens(10 * i), 0));
  }
  // Free in the order 2, 0, 1: block 3 (never used) is first in line, then 2, 0, 1.
  pool.free(std::vector<int32_t>{2, 0, 1});
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{3, 2, 0, 1}));
  EXPECT_EQ(pool.num_free_blocks(), 4) << "cached blocks still count as free";
  EXPECT_EQ(pool.num_cached_blocks(), 3);

  auto first = *pool.allocate(2);
  EXPECT_EQ(first, (std::vector<int32_t>{3, 2}));
  EXPECT_FALSE(pool.lookup(h[2], kNoParentHash, block_tokens(20), 0)) << "block 2 was evicted for reuse";
  EXPECT_FALSE(pool.is_cached(2));
  EXPECT_EQ(pool.lookup(h[0], kNoParentHash, block_tokens(0), 0), 0);
  EXPECT_EQ(pool.lookup(h[1], kNoParentHash, block_tokens(10), 0), 1);

  // Taking a cached block back removes it from the free list without evicting it.
  pool.touch(std::vector<int32_t>{1});
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{0}));
  EXPECT_TRUE(pool.is_cached(1));
}

TEST(BlockPool, LookupComparesTokensNotJustTheHash) {
  BlockPool pool(2, 4, true);
  auto ids = *pool.allocate(1);
  uint64_t h = hash_block_tokens(kNoParentHash, block_tokens(0), 0);
  ASSERT_TRUE(pool.cache_block(ids[0], h, kNoParentHash, block_tokens(0), 0));
  EXPECT_EQ(pool.lookup(h, kNoParentHash, block_tokens(0), 0), ids[0]);
  // Same hash value presented with other tokens / parent / extra key (a forged collision).
  EXPECT_FALSE(pool.lookup(h, kNoParentHash, block_tokens(1), 0));
  EXPECT_FALSE(pool.lookup(h, 42, block_tokens(0), 0));
  EXPECT_FALSE(pool.lookup(h, kNoParentHash, block_tokens(0), 7));
}

TEST(BlockPool, OneBlockPerHashAndNothingWhenCachingIsOff) {
  BlockPool pool(3, 4, true);
  auto ids = *pool.allocate(2);
  uint64_t h = hash_block_tokens(kNoParentHash, block_tokens(0), 0);
  EXPECT_TRUE(pool.cache_block(ids[0], h, kNoParentHash, block_tokens(0), 0));
  EXPECT_FALSE(pool.cache_block(ids[1], h, kNoParentHash, block_tokens(0), 0)) << "duplicate content stays private";
  EXPECT_FALSE(pool.cache_block(ids[0], h + 1, kNoParentHash, block_tokens(0), 0)) << "a block has one hash";

  BlockPool off(2, 4, false);
  auto b = *off.allocate(1);
  EXPECT_FALSE(off.cache_block(b[0], h, kNoParentHash, block_tokens(0), 0));
  EXPECT_FALSE(off.lookup(h, kNoParentHash, block_tokens(0), 0));
}

TEST(BlockPool, ResetPrefixCacheOnlyWhenIdle) {
  BlockPool pool(2, 4, true);
  auto ids = *pool.allocate(1);
  uint64_t h = hash_block_tokens(kNoParentHash, block_tokens(0), 0);
  pool.cache_block(ids[0], h, kNoParentHash, block_tokens(0), 0);
  EXPECT_FALSE(pool.reset_prefix_cache());
  pool.free(ids);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_FALSE(pool.lookup(h, kNoParentHash, block_tokens(0), 0));
}

TEST(BlockHash, ChainsParentTokensAndExtraKey) {
  auto t = block_tokens(5);
  uint64_t base = hash_block_tokens(kNoParentHash, t, 0);
  EXPECT_EQ(base, hash_block_tokens(kNoParentHash, t, 0));
  EXPECT_NE(base, hash_block_tokens(base, t, 0)) << "same tokens after another block";
  EXPECT_NE(base, hash_block_tokens(kNoParentHash, t, 1)) << "another LoRA / salt";
  auto u = t;
  std::swap(u[0], u[1]);
  EXPECT_NE(base, hash_block_tokens(kNoParentHash, u, 0)) << "order matters";
}

}  // namespace
}  // namespace cypris
