// build_batch_context: the flat arrays for a hand-built step (values computed by hand), and the
// scheduler handing out the same batch with its output.
#include "engine/scheduler/batch_context.h"

#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/scheduler/scheduler.h"
#include "engine/scheduler/scheduler_output.h"

namespace cypris {
namespace {

TEST(BatchContext, FlattensADecodeAndAPrefillChunk) {
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

  const BatchContext l = build_batch_context(out);
  EXPECT_EQ(l.token_ids, (std::vector<int32_t>{19, 7, 7, 7}));
  EXPECT_EQ(l.positions, (std::vector<int32_t>{9, 0, 1, 2}));
  EXPECT_EQ(l.slot_mapping, (std::vector<int64_t>{5 * 8 + 1, 0, 1, 2}));
  EXPECT_EQ(l.query_start_loc, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(l.seq_lens, (std::vector<int32_t>{10, 3}));
  EXPECT_EQ(l.max_blocks_per_seq, 2);
  EXPECT_EQ(l.block_tables, (std::vector<int32_t>{3, 5, 0, -1}));
  EXPECT_EQ(l.logits_indices, (std::vector<int32_t>{0})) << "B's chunk does not reach its last token";
  EXPECT_EQ(l.sampled_seqs, (std::vector<int32_t>{0}));
  EXPECT_EQ(l.max_query_len, 3);
  EXPECT_EQ(l.max_seq_len, 10);
}

TEST(BatchContext, RejectsTokensBeyondTheBlockTable) {
  auto a = std::make_shared<Request>("A", std::vector<int32_t>(20, 1), 5);
  SchedulerOutput out;
  out.block_size = 8;
  out.scheduled.push_back({a, 0, 20, {0, 1}, true, true});  // 20 tokens need 3 blocks
  EXPECT_THROW(build_batch_context(out), std::logic_error);
}

TEST(BatchContext, TheSchedulerHandsOutTheBatchItsRunnerRuns) {
  SchedulerConfig c;
  c.block_size = 8;
  c.num_gpu_blocks = 16;
  c.max_num_batched_tokens = 6;
  c.max_num_seqs = 4;
  c.max_model_len = 32;
  c.enable_chunked_prefill = true;
  Scheduler sched(c);
  sched.add_request(std::make_shared<Request>("A", std::vector<int32_t>{1, 2, 3}, 4));
  sched.add_request(std::make_shared<Request>("B", std::vector<int32_t>{5, 6, 7, 8, 9}, 4));
  const SchedulerOutput out = sched.schedule();
  const BatchContext& b = out.batch;
  // A's whole prompt (3 tokens, sampled) and B's first chunk of 3 (not sampled): budget 6.
  EXPECT_EQ(b.token_ids, (std::vector<int32_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(b.query_start_loc, (std::vector<int32_t>{0, 3, 6}));
  EXPECT_EQ(b.seq_lens, (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(b.max_query_len, 3);
  EXPECT_EQ(b.max_seq_len, 3);
  EXPECT_EQ(b.logits_indices, (std::vector<int32_t>{2}));
  EXPECT_EQ(b.sampled_seqs, (std::vector<int32_t>{0}));
  EXPECT_NO_THROW(b.validate(c.num_gpu_blocks, c.block_size));
}

TEST(BatchContext, ValidateRefusesAnUnderstatedMaximum) {
  BatchContext b = make_single_sequence_batch(std::vector<int32_t>{1, 2, 3}, 5, 4);
  EXPECT_EQ(b.max_query_len, 3);
  EXPECT_EQ(b.max_seq_len, 8);
  EXPECT_NO_THROW(b.validate(4, 4));
  b.max_seq_len = 7;  // a device kernel would size its launch for 7 and read past it
  EXPECT_THROW(b.validate(4, 4), Error);
  b.max_seq_len = 0;  // unknown is allowed
  b.max_query_len = 2;
  EXPECT_THROW(b.validate(4, 4), Error);
}

}  // namespace
}  // namespace cypris
