// Cutting a step into pipeline micro-batches: whole sequences, token counts as even as the
// sequences allow, every logits row in exactly one part, each part a valid batch of its own.
#include "engine/runtime/micro_batches.h"

#include <gtest/gtest.h>

#include <numeric>

namespace cypris {
namespace {

// Sequences with the given new-token counts, each in its own two blocks of 4 tokens; a logits row
// for each sequence's last token, listed last sequence first.
BatchContext batch_of(const std::vector<int32_t>& lens) {
  BatchContext b;
  b.max_blocks_per_seq = 2;
  b.query_start_loc.push_back(0);
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int32_t i = 0; i < lens[s]; ++i) {
      b.token_ids.push_back(static_cast<int32_t>(100 * s) + i);
      b.positions.push_back(i);
      b.slot_mapping.push_back(static_cast<int64_t>(2 * s + static_cast<size_t>(i / 4)) * 4 + i % 4);
    }
    b.query_start_loc.push_back(b.query_start_loc.back() + lens[s]);
    b.seq_lens.push_back(lens[s]);
    b.block_tables.push_back(static_cast<int32_t>(2 * s));
    b.block_tables.push_back(static_cast<int32_t>(2 * s + 1));
    b.max_query_len = std::max(b.max_query_len, lens[s]);
    b.max_seq_len = std::max(b.max_seq_len, lens[s]);
  }
  for (size_t s = lens.size(); s-- > 0;) b.logits_indices.push_back(b.query_start_loc[s + 1] - 1);
  return b;
}

TEST(MicroBatches, PartsAreWholeSequencesWithEvenTokenCounts) {
  const BatchContext b = batch_of({1, 1, 6, 1, 1, 1, 1, 8});  // 20 tokens
  const std::vector<MicroBatch> parts = split_micro_batches(b, 2);
  ASSERT_EQ(parts.size(), 2u);
  // Half is 10 tokens: sequences [0, 4) hold 9, [0, 5) hold 10, so the cut is after sequence 4.
  EXPECT_EQ(parts[0].first_seq, 0);
  EXPECT_EQ(parts[0].batch.num_seqs(), 5);
  EXPECT_EQ(parts[1].first_seq, 5);
  EXPECT_EQ(parts[1].batch.num_seqs(), 3);
  EXPECT_EQ(parts[0].batch.num_tokens() + parts[1].batch.num_tokens(), b.num_tokens());
}

TEST(MicroBatches, EveryRowOnceAndEachPartIsAValidBatch) {
  const BatchContext b = batch_of({3, 1, 1, 5, 2, 1, 7});
  for (int n : {1, 2, 3, 4, 7, 20}) {
    const std::vector<MicroBatch> parts = split_micro_batches(b, n);
    EXPECT_EQ(parts.size(), static_cast<size_t>(std::min(n, b.num_seqs())));
    std::vector<int> seen(b.logits_indices.size(), 0);
    int seq = 0;
    for (const MicroBatch& m : parts) {
      EXPECT_NO_THROW(m.batch.validate(64, 4)) << n;
      EXPECT_EQ(m.first_seq, seq);
      ASSERT_EQ(m.rows.size(), m.batch.logits_indices.size());
      const int32_t t0 = b.query_start_loc[static_cast<size_t>(m.first_seq)];
      for (size_t j = 0; j < m.rows.size(); ++j) {
        ++seen[static_cast<size_t>(m.rows[j])];
        // The same token, re-based.
        EXPECT_EQ(m.batch.logits_indices[j] + t0, b.logits_indices[static_cast<size_t>(m.rows[j])]);
        EXPECT_EQ(m.batch.token_ids[static_cast<size_t>(m.batch.logits_indices[j])],
                  b.token_ids[static_cast<size_t>(b.logits_indices[static_cast<size_t>(m.rows[j])])]);
      }
      for (int s = 0; s < m.batch.num_seqs(); ++s) {
        EXPECT_EQ(m.batch.block_tables[static_cast<size_t>(2 * s)], 2 * (seq + s));
      }
      seq += m.batch.num_seqs();
    }
    EXPECT_EQ(seq, b.num_seqs());
    for (int c : seen) EXPECT_EQ(c, 1) << n << " parts";
  }
}

TEST(MicroBatches, OnePartIsTheBatchItself) {
  const BatchContext b = batch_of({4, 2});
  const std::vector<MicroBatch> parts = split_micro_batches(b, 1);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].batch.token_ids, b.token_ids);
  EXPECT_EQ(parts[0].batch.logits_indices, b.logits_indices);
  EXPECT_EQ(parts[0].rows, (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace cypris
