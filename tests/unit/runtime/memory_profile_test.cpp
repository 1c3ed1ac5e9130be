// Sizing the GPU KV cache from a profiled peak: the --gpu-memory-utilization arithmetic and the
// dummy batches of the profile run.
#include "engine/runtime/memory_profile.h"

#include <gtest/gtest.h>

#include "engine/common/error.h"

namespace cypris {
namespace {

TEST(KvCacheBlocks, TakesWhatIsLeftOfTheAllowedFraction) {
  GpuMemoryBudget m;
  m.utilization = 0.5;
  m.total_bytes = 1000000;
  m.used_bytes = 200000;
  m.activation_peak = 100000;
  m.graph_reserve = 50000;
  m.bytes_per_block = 30000;
  // 500000 - 200000 - 100000 - 50000 = 150000 -> 5 blocks.
  EXPECT_EQ(kv_cache_blocks(m), 5);
  m.graph_reserve = 0;  // --enforce-eager: 200000 -> 6 blocks (rounded down)
  EXPECT_EQ(kv_cache_blocks(m), 6);
  m.utilization = 1.0;  // 1000000 - 300000 = 700000 -> 23
  EXPECT_EQ(kv_cache_blocks(m), 23);
  m.sampler_scratch = 90000;  // GPU sampling's buffers: 610000 -> 20
  EXPECT_EQ(kv_cache_blocks(m), 20);
}

TEST(KvCacheBlocks, NothingLeftIsAnErrorNamingTheFlag) {
  GpuMemoryBudget m;
  m.utilization = 0.3;
  m.total_bytes = 1000000;
  m.used_bytes = 250000;
  m.activation_peak = 40000;
  m.bytes_per_block = 30000;  // 10000 left: less than one block
  try {
    kv_cache_blocks(m);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-memory-utilization 0.3"), std::string::npos) << e.what();
  }
  m.used_bytes = 400000;  // more in use than allowed
  EXPECT_THROW(kv_cache_blocks(m), Error);
  m.utilization = 1.5;
  EXPECT_THROW(kv_cache_blocks(m), Error);
}

TEST(ProfileBatch, SplitsTheTokenBudgetOverTheSequences) {
  const BatchContext b = make_profile_prefill_batch(10, 4, 2048, 16);
  EXPECT_EQ(b.num_tokens(), 10);
  EXPECT_EQ(b.seq_lens, (std::vector<int32_t>{3, 3, 2, 2}));
  EXPECT_EQ(b.query_start_loc, (std::vector<int32_t>{0, 3, 6, 8, 10}));
  EXPECT_EQ(b.logits_indices, (std::vector<int32_t>{2, 5, 7, 9}));
  EXPECT_EQ(b.positions[3], 0);                            // each sequence starts at position 0
  for (int64_t slot : b.slot_mapping) EXPECT_LT(slot, 0);  // no KV is written
  EXPECT_NO_THROW(b.validate(1, 16));                      // a one-block cache runs it
}

TEST(ProfileBatch, NoMoreSequencesThanTokensAndPositionsStayInTheRotaryTable) {
  const BatchContext few = make_profile_prefill_batch(3, 256, 2048, 16);
  EXPECT_EQ(few.num_seqs(), 3);
  const BatchContext one = make_profile_prefill_batch(100, 1, 64, 16);
  EXPECT_EQ(one.num_seqs(), 1);
  EXPECT_EQ(one.max_blocks_per_seq, 7);
  for (int32_t p : one.positions) EXPECT_LT(p, 64);
  EXPECT_NO_THROW(one.validate(1, 16));
  EXPECT_THROW(make_profile_prefill_batch(0, 1, 64, 16), Error);
}

TEST(ProfileBatch, DecodeBatchHasTheLargestGraphsShape) {
  const BatchContext b = make_profile_decode_batch(8, 100, 16);
  EXPECT_EQ(b.num_seqs(), 8);
  EXPECT_EQ(b.num_tokens(), 8);
  EXPECT_EQ(b.max_blocks_per_seq, 7);
  EXPECT_EQ(b.positions[5], 99);
  EXPECT_NO_THROW(b.validate(1, 16));
}

}  // namespace
}  // namespace cypris
