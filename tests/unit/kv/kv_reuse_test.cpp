// --context-shift across requests, the pure part: where a new prompt finds its tokens in an earlier
// sequence (match_for_reuse), and the KV cache manager's remembered sequences, whose blocks stay free
// and are read only while no one was handed them since (find_reuse, reuse_kv).
#include "engine/kv/kv_reuse.h"

#include <gtest/gtest.h>

#include "engine/kv/kv_cache_manager.h"
#include "tests/support/token_runs.h"

namespace cypris {
namespace {

using test::cat;
using test::seq;

// A chat: system prompt S, messages A and B, a reply R; the next turn drops A and adds N.
const std::vector<int32_t> kS = seq(1, 5), kA = seq(100, 20), kB = seq(200, 30), kR = seq(300, 10), kN = seq(400, 7);

TEST(MatchForReuse, ATrimmedChatKeepsItsSystemPromptAndMovesTheLaterMessages) {
  const auto earlier = cat({kS, kA, kB, kR});
  const auto prompt = cat({kS, kB, kR, kN});
  const ReuseMatch m = match_for_reuse(prompt, 0, earlier);
  EXPECT_EQ(m.same_end, 5);             // the system prompt where it was
  EXPECT_EQ(m.run_src, 5 + 20);         // B and R from after A
  EXPECT_EQ(m.end, 5 + 30 + 10);        // up to the end of the earlier sequence
  // A prefix-cache hit covers the first 4 tokens: the rest is the same.
  const ReuseMatch h = match_for_reuse(prompt, 4, earlier);
  EXPECT_EQ(h.same_end, 5);
  EXPECT_EQ(h.end, 45);
}

TEST(MatchForReuse, WithoutAMatchingStretchOnlyTheCommonPrefix) {
  const auto earlier = cat({kS, kA, kB, kR});
  // Different messages after the system prompt.
  ReuseMatch m = match_for_reuse(cat({kS, seq(500, 40)}), 0, earlier);
  EXPECT_EQ(m.same_end, 5);
  EXPECT_EQ(m.end, 5);
  // A stretch shorter than kMinReuseRun is not moved.
  const auto short_b = seq(200, kMinReuseRun - 1);
  m = match_for_reuse(cat({kS, short_b, kN}), 0, earlier);
  EXPECT_EQ(m.end, 5);
  // A stretch that does not continue right after the common prefix is not reused (no gaps).
  m = match_for_reuse(cat({kS, kN, kB, kR}), 0, earlier);
  EXPECT_EQ(m.end, 5);
  // Nothing in common at all.
  m = match_for_reuse(seq(700, 50), 0, earlier);
  EXPECT_EQ(m.end, 0);
  EXPECT_EQ(m.same_end, 0);
}

TEST(MatchForReuse, TheLongestStretchWinsAndTheStartNeverMovesUp) {
  // B's first 20 tokens appear twice: once followed by junk, once by the rest of B and R.
  const auto b_head = seq(200, 20);
  const auto earlier = cat({kS, kA, b_head, seq(900, 5), kA, kB, kR});
  const ReuseMatch m = match_for_reuse(cat({kS, kB, kR, kN}), 0, earlier);
  EXPECT_EQ(m.same_end, 5);
  EXPECT_EQ(m.run_src, 5 + 20 + 20 + 5 + 20);
  EXPECT_EQ(m.end, 5 + 40);
  // A stretch found only before the prompt's position (it would move up) is not reused: here a
  // prefix-cache hit covers S and A, and B sits right after S in the earlier sequence.
  const ReuseMatch up = match_for_reuse(cat({kS, kA, kB, kN}), 25, cat({kS, kB, kN}));
  EXPECT_EQ(up.end, 25);
  EXPECT_EQ(up.same_end, 25);
  // The whole earlier sequence as the prompt's start (the chat not trimmed yet): all of it in place.
  const ReuseMatch same = match_for_reuse(cat({kS, kA, kB, kN}), 0, cat({kS, kA, kB}));
  EXPECT_EQ(same.same_end, 55);
  EXPECT_EQ(same.end, 55);
}

TEST(MatchForReuse, RepetitiveTextGivesATrueMatch) {
  // 2000 equal tokens: many candidates; whatever is chosen must really match.
  const std::vector<int32_t> earlier = cat({kS, std::vector<int32_t>(2000, 7)});
  const std::vector<int32_t> prompt = cat({kS, seq(50, 1), std::vector<int32_t>(100, 7)});
  const ReuseMatch m = match_for_reuse(prompt, 6, earlier);
  ASSERT_GE(m.end, 6 + kMinReuseRun);
  for (int32_t p = m.same_end; p < m.end; ++p)
    EXPECT_EQ(prompt[size_t(p)], earlier[size_t(p - m.same_end + m.run_src)]) << p;
}

KvCacheManager manager(int32_t blocks, bool caching) {
  KvCacheManager kv(KvCacheConfig{8, blocks, 0, caching});
  kv.enable_reuse(kRetainedSequences);
  return kv;
}

// Runs a request's prompt plus `outputs` generated tokens through the manager and finishes it.
void run_and_finish(KvCacheManager& kv, Request& r, int32_t outputs) {
  ComputedBlocks hit = kv.get_computed_blocks(r);
  ASSERT_TRUE(kv.allocate_slots(r, r.num_tokens() - hit.num_tokens, &hit));
  r.set_num_computed_tokens(r.num_tokens());
  for (int32_t i = 0; i < outputs; ++i) {
    r.append_output_tokens(std::vector<int32_t>{9000 + i});
    if (i + 1 < outputs) {
      ASSERT_TRUE(kv.allocate_slots(r, 1));
      r.set_num_computed_tokens(r.num_tokens());
    }
  }
  kv.cache_computed_blocks(r);
  kv.remember_sequence(r);
  kv.free(r);
}

TEST(KvReuse, ATrimmedChatCopiesTheFinishedSequencesKvToTheNewPositions) {
  for (bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    KvCacheManager kv = manager(40, caching);
    Request first("t1", cat({kS, kA, kB}), 16);
    run_and_finish(kv, first, 4);  // 55 prompt tokens + 4 outputs, the last without KV
    const std::vector<int32_t> kv_tokens(first.all_token_ids().begin(), first.all_token_ids().end() - 1);
    Request second("t2", cat({kS, kB, std::vector<int32_t>(kv_tokens.end() - 3, kv_tokens.end()), kN}), 16);
    ComputedBlocks hit = kv.get_computed_blocks(second);
    EXPECT_EQ(hit.num_tokens, 0);  // block 0 holds S and A's start: no hit
    auto reuse = kv.find_reuse(second, hit.num_tokens);
    ASSERT_TRUE(reuse.has_value());
    EXPECT_EQ(reuse->same_end, 5);
    EXPECT_EQ(reuse->end, 5 + 30 + 3);  // B and the three outputs with KV
    EXPECT_EQ(reuse->distance(), 20);
    EXPECT_EQ(reuse->exact_end, 5);
    // The finished sequence's slots, read before allocating (the allocation may take its blocks).
    ASSERT_TRUE(kv.allocate_slots(second, second.num_tokens(), &hit));
    const auto moves = kv.reuse_kv(second, *reuse);
    ASSERT_EQ(int32_t(moves.size()), reuse->num_tokens());
    auto table = kv.block_ids("t2");
    for (const KvSlotMove& m : moves) {
      EXPECT_EQ(second.all_token_ids()[size_t(m.new_pos)], kv_tokens[size_t(m.old_pos)]);
      EXPECT_EQ(m.dst, int64_t(table[size_t(m.new_pos / 8)]) * 8 + m.new_pos % 8);
      EXPECT_EQ(m.new_pos < 5 ? m.old_pos : m.old_pos - 20, m.new_pos);
    }
    // Blocks holding moved KV never reach the prefix cache: only block 0 (S) of the reused part
    // could; its KV (S) is exact but the block also holds moved tokens.
    second.set_num_computed_tokens(second.num_tokens());
    kv.cache_computed_blocks(second);
    for (int32_t b : table) EXPECT_FALSE(kv.gpu_pool().is_cached(b)) << b;
  }
}

TEST(KvReuse, BlocksHandedOutSinceAreNotReadAndSaltsStaySeparate) {
  KvCacheManager kv = manager(16, false);
  Request first("t1", cat({kS, kA, kB}), 16);
  run_and_finish(kv, first, 1);  // 55 tokens with KV in 7 blocks
  Request second("t2", cat({kS, kB, kN}), 16);
  ASSERT_TRUE(kv.find_reuse(second, 0).has_value());
  Request salted("t3", cat({kS, kB, kN}), 16);
  salted.set_cache_salt(42);
  EXPECT_FALSE(kv.find_reuse(salted, 0).has_value());
  // Another request takes 10 of the 16 blocks: the LRU end first (the 9 never used, then t1's last
  // block, freed first), so t1's first 6 blocks are intact and only they are offered.
  Request other("o", seq(5000, 10 * 8), 4);
  ASSERT_TRUE(kv.allocate_slots(other, 10 * 8));
  auto partial = kv.find_reuse(second, 0);
  // 48 tokens of t1 survive: S, A and the first 23 of B.
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->same_end, 5);
  EXPECT_EQ(partial->run_src, 25);
  EXPECT_EQ(partial->num_moved(), 23);
  kv.free(other);
  Request all("a", seq(6000, 16 * 8), 4);
  ASSERT_TRUE(kv.allocate_slots(all, 16 * 8));
  EXPECT_FALSE(kv.find_reuse(second, 0).has_value());
}

TEST(KvReuse, RemembersAFewSequencesMostRecentFirst) {
  KvCacheManager kv = manager(200, false);
  for (int i = 0; i < kRetainedSequences + 2; ++i) {
    Request r("r" + std::to_string(i), cat({kS, seq(1000 * (i + 1), 40)}), 4);
    run_and_finish(kv, r, 1);
  }
  EXPECT_EQ(kv.num_remembered_sequences(), kRetainedSequences);
  // The oldest two are forgotten; the newest is found first.
  Request old_turn("x", cat({kS, seq(1000 + 10, 30), kN}), 4);
  auto u = kv.find_reuse(old_turn, 0);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->end, 5);  // only the system prompt
  Request new_turn("y", cat({kS, seq(1000 * (kRetainedSequences + 2) + 10, 30), kN}), 4);
  u = kv.find_reuse(new_turn, 0);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->source, 0);
  EXPECT_EQ(u->end, 35);
  // Without enable_reuse nothing is remembered.
  KvCacheManager off(KvCacheConfig{8, 50, 0, false});
  Request r("r", cat({kS, kA}), 4);
  run_and_finish(off, r, 1);
  EXPECT_EQ(off.num_remembered_sequences(), 0);
}

}  // namespace
}  // namespace cypris
