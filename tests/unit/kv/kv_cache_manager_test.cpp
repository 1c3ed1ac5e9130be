// KvCacheManager: slot allocation, prefix-cache hits, fork + copy-on-write, swapping, config checks.
#include "engine/kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <set>

#include "engine/common/error.h"
#include "tests/support/token_runs.h"

namespace cypris {
namespace {

using test::seq;

Request make_request(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens = 16) {
  return Request(id, std::move(prompt), max_tokens);
}

KvCacheManager make_manager(int32_t blocks, bool caching = false, int32_t cpu_blocks = 0, int32_t block_size = 8) {
  return KvCacheManager(KvCacheConfig{block_size, blocks, cpu_blocks, caching});
}

// Pretend the model computed `n` more tokens of the request.
void compute(KvCacheManager& kv, Request& r, int32_t n) {
  r.set_num_computed_tokens(r.num_computed_tokens() + n);
  kv.cache_computed_blocks(r);
}

TEST(KvCacheConfig, RejectsBadValuesNamingTheFlag) {
  for (int32_t bs : {0, 1, 4, 12, 64}) {
    try {
      KvCacheConfig{bs, 10, 0, false}.validate();
      FAIL() << "block size " << bs << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--block-size must be one of 8, 16, 32"), std::string::npos) << e.what();
    }
  }
  for (int32_t bs : kAllowedBlockSizes) EXPECT_NO_THROW((KvCacheConfig{bs, 10, 0, false}.validate()));
  EXPECT_THROW((KvCacheConfig{16, 0, 0, false}.validate()), Error);
  EXPECT_THROW((KvCacheConfig{16, 10, -1, false}.validate()), Error);
  EXPECT_THROW(make_manager(10, false, 0, 12), Error);
}

// Table: starting from an empty request, a sequence of steps (new tokens); after each step the
// table size and free blocks must be as computed by hand (block size 8, 10 blocks).
TEST(KvCacheManager, AllocatesBlocksAsTokensAccumulate) {
  struct Step {
    int32_t num_new;
    int32_t expect_blocks;
    int32_t expect_free;
  };
  const Step steps[] = {
      {5, 1, 9},   // tokens 0..4
      {3, 1, 9},   // 5..7 fill block 0 exactly
      {1, 2, 8},   // token 8 opens block 1
      {16, 4, 6},  // 9..24 -> blocks 1, 2, 3
      {7, 4, 6},   // 25..31 end of block 3
  };
  auto kv = make_manager(10);
  Request r = make_request("a", seq(0, 40));
  for (const auto& s : steps) {
    auto alloc = kv.allocate_slots(r, s.num_new);
    ASSERT_TRUE(alloc);
    EXPECT_TRUE(alloc->copies.empty());
    compute(kv, r, s.num_new);
    EXPECT_EQ(int32_t(kv.block_ids("a").size()), s.expect_blocks) << "after " << r.num_computed_tokens();
    EXPECT_EQ(kv.num_free_blocks(), s.expect_free);
  }
  kv.free(r);
  EXPECT_EQ(kv.num_free_blocks(), 10);
  EXPECT_FALSE(kv.has_blocks("a"));
}

TEST(KvCacheManager, DoesNotFitIsANulloptAndChangesNothing) {
  auto kv = make_manager(3);
  Request a = make_request("a", seq(0, 20));
  ASSERT_TRUE(kv.allocate_slots(a, 16));  // 2 blocks
  Request b = make_request("b", seq(100, 20));
  EXPECT_FALSE(kv.can_allocate(b, 9));
  EXPECT_FALSE(kv.allocate_slots(b, 9)) << "needs 2 blocks, 1 free";
  EXPECT_FALSE(kv.has_blocks("b"));
  EXPECT_EQ(kv.num_free_blocks(), 1);
  EXPECT_TRUE(kv.allocate_slots(b, 8));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  // Lookahead slots (speculative tokens) count too.
  compute(kv, a, 16);
  EXPECT_FALSE(kv.allocate_slots(a, 1, nullptr, 0)) << "token 16 needs a third block";
}

TEST(KvCacheManager, PrefixHitSharesFullBlocksAndCountsStats) {
  auto kv = make_manager(20, /*caching=*/true);
  // A: 40 tokens = 5 full blocks. B: the same first 32 tokens, then different ones.
  Request a = make_request("a", seq(0, 40));
  auto hit_a = kv.get_computed_blocks(a);
  EXPECT_EQ(hit_a.num_tokens, 0) << "cold cache";
  ASSERT_TRUE(kv.allocate_slots(a, 40, &hit_a));
  compute(kv, a, 40);

  std::vector<int32_t> b_tokens = seq(0, 32);
  for (int32_t t : seq(500, 12)) b_tokens.push_back(t);
  Request b = make_request("b", b_tokens);
  auto hit = kv.get_computed_blocks(b);
  EXPECT_EQ(hit.num_tokens, 32);
  auto a_blocks = std::vector<int32_t>(kv.block_ids("a").begin(), kv.block_ids("a").end());
  EXPECT_EQ(hit.block_ids, std::vector<int32_t>(a_blocks.begin(), a_blocks.begin() + 4));
  ASSERT_TRUE(kv.allocate_slots(b, 12, &hit));
  b.set_num_computed_tokens(hit.num_tokens);
  auto b_blocks = kv.block_ids("b");
  ASSERT_EQ(b_blocks.size(), 6u);  // 4 shared + ceil(12 / 8) own
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(b_blocks[size_t(i)], a_blocks[size_t(i)]);
    EXPECT_EQ(kv.gpu_pool().ref_count(a_blocks[size_t(i)]), 2);
  }
  EXPECT_EQ(kv.gpu_pool().ref_count(a_blocks[4]), 1);
  EXPECT_EQ(kv.num_free_blocks(), 20 - 5 - 2);

  const auto& st = kv.prefix_cache_stats();
  EXPECT_EQ(st.requests, 2);
  EXPECT_EQ(st.queries, 40 + 44);
  EXPECT_EQ(st.hits, 32);
  EXPECT_DOUBLE_EQ(st.hit_rate(), 32.0 / 84.0);

  // After A leaves, the shared blocks are still B's; A's private block stays cached but free.
  kv.free(a);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(kv.gpu_pool().ref_count(a_blocks[size_t(i)]), 1);
  EXPECT_EQ(kv.gpu_pool().ref_count(a_blocks[4]), 0);
  EXPECT_TRUE(kv.gpu_pool().is_cached(a_blocks[4]));
}

TEST(KvCacheManager, NeverServesTheWholePromptFromCache) {
  auto kv = make_manager(10, true);
  Request a = make_request("a", seq(0, 32));  // exactly 4 blocks
  auto none = kv.get_computed_blocks(a);
  ASSERT_TRUE(kv.allocate_slots(a, 32, &none));
  compute(kv, a, 32);
  kv.free(a);
  Request again = make_request("again", seq(0, 32));
  auto hit = kv.get_computed_blocks(again);
  EXPECT_EQ(hit.num_tokens, 24) << "the last token must be computed for its logits, so block 3 is recomputed";
  Request one = make_request("one", seq(0, 1));
  EXPECT_EQ(kv.get_computed_blocks(one).num_tokens, 0);
}

TEST(KvCacheManager, HitTakesBackFreeCachedBlocksAndCountsThemAsNeeded) {
  auto kv = make_manager(4, true);
  Request a = make_request("a", seq(0, 24));
  auto none = kv.get_computed_blocks(a);
  ASSERT_TRUE(kv.allocate_slots(a, 24, &none));
  compute(kv, a, 24);
  kv.free(a);  // 3 cached free blocks + 1 never used
  EXPECT_EQ(kv.num_free_blocks(), 4);
  Request b = make_request("b", seq(0, 40));  // hit 3 blocks (24 tokens), 16 new tokens -> 2 blocks
  auto hit = kv.get_computed_blocks(b);
  EXPECT_EQ(hit.num_tokens, 24);
  EXPECT_EQ(kv.num_blocks_needed(b, 16, &hit), 3 + 2);
  EXPECT_FALSE(kv.allocate_slots(b, 16, &hit)) << "taking back 3 free blocks + 2 new > 4 free";
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_TRUE(kv.allocate_slots(b, 8, &hit)) << "one chunk of 8 fits";
  EXPECT_EQ(kv.num_free_blocks(), 0);
}

TEST(KvCacheManager, EvictionIsLeastRecentlyUsedFirst) {
  // 6 blocks. Three requests of one full block + 1 token each (2 blocks), freed in order x, y, z.
  auto kv = make_manager(6, true);
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(make_request("r" + std::to_string(i), seq(100 * i, 9)));
  for (auto& r : reqs) {
    auto none = kv.get_computed_blocks(r);
    ASSERT_TRUE(kv.allocate_slots(r, 9, &none));
    compute(kv, r, 9);
  }
  for (auto& r : reqs) kv.free(r);
  // Each request freed its blocks tail first, so the order of eviction is
  // r0.tail, r0.head, r1.tail, r1.head, r2.tail, r2.head. Allocate 3: r0 entirely and r1's tail go.
  Request filler = make_request("filler", seq(9000, 24));
  ASSERT_TRUE(kv.allocate_slots(filler, 24));
  for (int i = 0; i < 3; ++i) {
    Request probe = make_request("p" + std::to_string(i), seq(100 * i, 9));
    EXPECT_EQ(kv.get_computed_blocks(probe).num_tokens, i == 0 ? 0 : 8) << "request " << i;
  }
}

TEST(KvCacheManager, SaltSeparatesCaches) {
  auto kv = make_manager(10, true);
  Request a = make_request("a", seq(0, 17));
  auto none = kv.get_computed_blocks(a);
  ASSERT_TRUE(kv.allocate_slots(a, 17, &none));
  compute(kv, a, 17);
  Request b = make_request("b", seq(0, 17));
  b.set_cache_salt(7);  // e.g. another LoRA adapter
  EXPECT_EQ(kv.get_computed_blocks(b).num_tokens, 0);
  Request c = make_request("c", seq(0, 17));
  EXPECT_EQ(kv.get_computed_blocks(c).num_tokens, 16);
}

TEST(KvCacheManager, PrefixCachingOffNeverHits) {
  auto kv = make_manager(10, false);
  Request a = make_request("a", seq(0, 17));
  ASSERT_TRUE(kv.allocate_slots(a, 17));
  compute(kv, a, 17);
  Request b = make_request("b", seq(0, 17));
  EXPECT_EQ(kv.get_computed_blocks(b).num_tokens, 0);
  EXPECT_EQ(kv.prefix_cache_stats().queries, 0);
}

TEST(KvCacheManager, ForkSharesBlocksAndCopiesOnWrite) {
  auto kv = make_manager(10);
  Request parent = make_request("p", seq(0, 10));  // 10 tokens: block 0 full, block 1 holds 2
  ASSERT_TRUE(kv.allocate_slots(parent, 10));
  compute(kv, parent, 10);
  parent.append_output_token(111);
  Request child = *parent.fork("c");
  child.replace_last_output_token(222);
  kv.fork(parent, child);
  auto shared = std::vector<int32_t>(kv.block_ids("p").begin(), kv.block_ids("p").end());
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(kv.gpu_pool().ref_count(shared[0]), 2);
  EXPECT_EQ(kv.gpu_pool().ref_count(shared[1]), 2);
  EXPECT_EQ(kv.num_free_blocks(), 8) << "forking allocates nothing";

  // The parent writes token 10 into the shared, partly filled block 1: it gets a private copy.
  EXPECT_EQ(kv.num_blocks_needed(parent, 1), 1);
  auto pa = kv.allocate_slots(parent, 1);
  ASSERT_TRUE(pa);
  ASSERT_EQ(pa->copies.size(), 1u);
  EXPECT_EQ(pa->copies[0].src, shared[1]);
  EXPECT_EQ(pa->copies[0].dst, kv.block_ids("p")[1]);
  EXPECT_NE(kv.block_ids("p")[1], shared[1]);
  EXPECT_EQ(kv.block_ids("p")[0], shared[0]) << "the full block stays shared";
  EXPECT_EQ(kv.gpu_pool().ref_count(shared[1]), 1);
  // The child is now the only owner of the old block 1 and writes in place.
  auto ca = kv.allocate_slots(child, 1);
  ASSERT_TRUE(ca);
  EXPECT_TRUE(ca->copies.empty());
  EXPECT_EQ(kv.block_ids("c")[1], shared[1]);

  kv.free(parent);
  EXPECT_EQ(kv.gpu_pool().ref_count(shared[0]), 1);
  kv.free(child);
  EXPECT_EQ(kv.num_free_blocks(), 10);
}

TEST(KvCacheManager, ForkAtABlockBoundaryNeedsNoCopy) {
  auto kv = make_manager(10);
  Request parent = make_request("p", seq(0, 16));
  ASSERT_TRUE(kv.allocate_slots(parent, 16));
  compute(kv, parent, 16);
  parent.append_output_token(1);
  Request child = *parent.fork("c");
  kv.fork(parent, child);
  auto pa = kv.allocate_slots(parent, 1);
  auto ca = kv.allocate_slots(child, 1);
  ASSERT_TRUE(pa && ca);
  EXPECT_TRUE(pa->copies.empty());
  EXPECT_TRUE(ca->copies.empty());
  EXPECT_NE(kv.block_ids("p")[2], kv.block_ids("c")[2]);
  EXPECT_EQ(kv.num_free_blocks(), 6);
}

TEST(KvCacheManager, ForkedEmptyLookaheadBlockIsReplacedWithoutCopy) {
  auto kv = make_manager(10);
  Request parent = make_request("p", seq(0, 16));
  ASSERT_TRUE(kv.allocate_slots(parent, 16, nullptr, /*lookahead=*/4));  // 3 blocks, block 2 empty
  compute(kv, parent, 16);
  parent.append_output_token(1);
  Request child = *parent.fork("c");
  kv.fork(parent, child);
  auto pa = kv.allocate_slots(parent, 1);
  ASSERT_TRUE(pa);
  EXPECT_TRUE(pa->copies.empty()) << "block 2 holds no computed KV yet";
  EXPECT_NE(kv.block_ids("p")[2], kv.block_ids("c")[2]);
}

TEST(KvCacheManager, SwapOutAndInMovesComputedBlocks) {
  auto kv = make_manager(6, false, /*cpu_blocks=*/3);
  Request a = make_request("a", seq(0, 30));
  ASSERT_TRUE(kv.allocate_slots(a, 20, nullptr, 8));  // 28 slots -> 4 blocks
  compute(kv, a, 20);                                 // KV in blocks 0..2
  auto gpu_before = std::vector<int32_t>(kv.block_ids("a").begin(), kv.block_ids("a").end());
  ASSERT_TRUE(kv.can_swap_out(a));
  auto out = kv.swap_out(a);
  ASSERT_TRUE(out);
  ASSERT_EQ(out->size(), 3u) << "only blocks with computed KV travel";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*out)[i].src, gpu_before[i]);
  EXPECT_TRUE(kv.is_swapped("a"));
  EXPECT_EQ(kv.num_free_blocks(), 6);
  EXPECT_EQ(kv.num_free_cpu_blocks(), 0);
  EXPECT_THROW(kv.allocate_slots(a, 1), std::logic_error);

  // Swap back in with room for 5 more tokens (25 -> 4 blocks).
  EXPECT_TRUE(kv.can_swap_in(a, 5));
  Request hog = make_request("hog", seq(0, 24));
  ASSERT_TRUE(kv.allocate_slots(hog, 24));
  EXPECT_FALSE(kv.can_swap_in(a, 5)) << "3 GPU blocks free, 4 needed";
  EXPECT_FALSE(kv.swap_in(a, 5));
  kv.free(hog);
  auto in = kv.swap_in(a, 5);
  ASSERT_TRUE(in);
  ASSERT_EQ(in->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*in)[i].src, (*out)[i].dst);
    EXPECT_EQ((*in)[i].dst, kv.block_ids("a")[i]);
  }
  EXPECT_EQ(kv.num_free_cpu_blocks(), 3);
  EXPECT_TRUE(kv.allocate_slots(a, 5));
  EXPECT_EQ(kv.block_ids("a").size(), 4u);
}

TEST(KvCacheManager, SwapOutRefusedWhenCpuPoolIsFull) {
  auto kv = make_manager(6, false, 1);
  Request a = make_request("a", seq(0, 20));
  ASSERT_TRUE(kv.allocate_slots(a, 20));
  compute(kv, a, 20);
  EXPECT_FALSE(kv.can_swap_out(a));
  EXPECT_FALSE(kv.swap_out(a));
  EXPECT_FALSE(kv.is_swapped("a"));
  EXPECT_EQ(kv.block_ids("a").size(), 3u);
}

TEST(KvCacheManager, FreeingSwappedRequestReturnsCpuBlocks) {
  auto kv = make_manager(6, false, 4);
  Request a = make_request("a", seq(0, 20));
  ASSERT_TRUE(kv.allocate_slots(a, 20));
  compute(kv, a, 20);
  ASSERT_TRUE(kv.swap_out(a));
  EXPECT_EQ(kv.num_free_cpu_blocks(), 1);
  kv.free(a);
  EXPECT_EQ(kv.num_free_cpu_blocks(), 4);
  EXPECT_EQ(kv.num_free_blocks(), 6);
}

}  // namespace
}  // namespace cypris
