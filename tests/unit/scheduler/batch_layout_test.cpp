// build_batch_layout: the flat arrays for a hand-built step (values computed by hand).
#include "engine/scheduler/batch_layout.h"

#include <gtest/gtest.h>

namespace cypris {
namespace {

TEST(BatchLayout, FlattensADecodeAndAPrefillChunk) {
  // A: 10 tokens, 9 computed, decodes token 9; blocks [3, 5]. B: new, 20-token prompt, first chunk
  // of 3; blocks [0]. Block size 8.
  auto a = std::make_shared<Request>("A", std::vector<int32_t>{10, 11, 12, 13, 14, 15, 16, 17, 18}, 5);
  a->append_output_token(19);
  auto b = std::make_shared<Request>("B", std::vector<int32_t>(20, 7), 5);
  SchedulerOutput out;
  out.block_size = 8;
  out.scheduled.push_back({a, 9, 1, {3, 5}, false, true});
  out.scheduled.push_back({b, 0, 3, {0}, true, false});
  out.total_num_scheduled_tokens = 4;

  BatchLayout l = build_batch_layout(out);
  EXPECT_EQ(l.token_ids, (std::vector<int32_t>{19, 7, 7, 7}));
  EXPECT_EQ(l.positions, (std::vector<int32_t>{9, 0, 1, 2}));
  EXPECT_EQ(l.slot_mapping, (std::vector<int64_t>{5 * 8 + 1, 0, 1, 2}));
  EXPECT_EQ(l.query_start_loc, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(l.context_lens, (std::vector<int32_t>{9, 0}));
  EXPECT_EQ(l.seq_lens, (std::vector<int32_t>{10, 3}));
  EXPECT_EQ(l.max_blocks_per_seq, 2);
  EXPECT_EQ(l.block_tables, (std::vector<int32_t>{3, 5, 0, -1}));
  EXPECT_EQ(l.logits_indices, (std::vector<int32_t>{0})) << "B's chunk does not reach its last token";
  EXPECT_EQ(l.sampled_requests, (std::vector<int32_t>{0}));
  EXPECT_EQ(l.max_query_len, 3);
  EXPECT_EQ(l.max_seq_len, 10);
}

TEST(BatchLayout, RejectsTokensBeyondTheBlockTable) {
  auto a = std::make_shared<Request>("A", std::vector<int32_t>(20, 1), 5);
  SchedulerOutput out;
  out.block_size = 8;
  out.scheduled.push_back({a, 0, 20, {0, 1}, true, true});  // 20 tokens need 3 blocks
  EXPECT_THROW(build_batch_layout(out), std::logic_error);
}

}  // namespace
}  // namespace cypris
