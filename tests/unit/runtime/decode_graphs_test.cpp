// The pure parts of CUDA-graph decode: capture sizes, padding, and which batches may replay a graph;
// and that the CPU backend runs eagerly when graphs are asked for.
#include "engine/runtime/decode_graphs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/runtime/model_runner.h"

namespace cypris {
namespace {

TEST(GraphCaptureSizes, FollowsVllmListAndStopsAtMaxNumSeqs) {
  const std::vector<int> all = graph_capture_sizes(256);
  ASSERT_EQ(all.size(), 35u);  // 1, 2, 4 and 8 * (1..32)
  EXPECT_EQ(all[0], 1);
  EXPECT_EQ(all[1], 2);
  EXPECT_EQ(all[2], 4);
  EXPECT_EQ(all[3], 8);
  EXPECT_EQ(all[4], 16);
  EXPECT_EQ(all[5], 24);
  EXPECT_EQ(all.back(), 256);
  EXPECT_EQ(graph_capture_sizes(1000), all);  // never beyond 256
  EXPECT_EQ(graph_capture_sizes(1), (std::vector<int>{1}));
  EXPECT_EQ(graph_capture_sizes(3), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(graph_capture_sizes(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(graph_capture_sizes(17), (std::vector<int>{1, 2, 4, 8, 16, 24}));
}

TEST(GraphCaptureSizes, PadsToTheNextSize) {
  const std::vector<int> sizes = graph_capture_sizes(256);
  EXPECT_EQ(padded_graph_batch_size(sizes, 1), 1);
  EXPECT_EQ(padded_graph_batch_size(sizes, 3), 4);
  EXPECT_EQ(padded_graph_batch_size(sizes, 5), 8);
  EXPECT_EQ(padded_graph_batch_size(sizes, 8), 8);
  EXPECT_EQ(padded_graph_batch_size(sizes, 17), 24);
  EXPECT_EQ(padded_graph_batch_size(sizes, 249), 256);
  EXPECT_EQ(padded_graph_batch_size(sizes, 257), 0);
  EXPECT_EQ(padded_graph_batch_size(sizes, 0), 0);
  EXPECT_EQ(padded_graph_batch_size(graph_capture_sizes(3), 5), 0);
}

// `n` sequences decoding one token each, with the given context lengths.
BatchContext decode_batch(const std::vector<int32_t>& lens, int block_size = 16) {
  BatchContext b;
  int32_t max_blocks = 0;
  for (int32_t l : lens) max_blocks = std::max(max_blocks, (l + block_size - 1) / block_size);
  b.max_blocks_per_seq = max_blocks;
  b.query_start_loc.push_back(0);
  for (size_t s = 0; s < lens.size(); ++s) {
    b.token_ids.push_back(1);
    b.positions.push_back(lens[s] - 1);
    b.slot_mapping.push_back(0);
    b.query_start_loc.push_back(static_cast<int32_t>(s + 1));
    b.seq_lens.push_back(lens[s]);
    for (int32_t k = 0; k < max_blocks; ++k) b.block_tables.push_back(0);
    b.logits_indices.push_back(static_cast<int32_t>(s));
  }
  return b;
}

DecodeGraphPolicy policy(int64_t max_num_seqs = 256, int64_t max_len = 100) {
  DecodeGraphPolicy p;
  p.enforce_eager = false;
  p.sizes = graph_capture_sizes(max_num_seqs);
  p.max_seq_len_to_capture = max_len;
  return p;
}

TEST(GraphEligibility, DecodeBatchesWithinBoundsReplay) {
  EXPECT_TRUE(is_graph_eligible(decode_batch({5}), policy()));
  EXPECT_TRUE(is_graph_eligible(decode_batch({5, 100, 17}), policy()));
  EXPECT_TRUE(is_graph_eligible(decode_batch(std::vector<int32_t>(256, 3)), policy()));
}

TEST(GraphEligibility, EagerFlagTooManySeqsOrTooLongRunEagerly) {
  DecodeGraphPolicy eager = policy();
  eager.enforce_eager = true;
  EXPECT_FALSE(is_graph_eligible(decode_batch({5}), eager));
  EXPECT_FALSE(is_graph_eligible(decode_batch(std::vector<int32_t>(257, 3)), policy()));
  EXPECT_FALSE(is_graph_eligible(decode_batch({5, 5, 5, 5, 5}), policy(4)));
  EXPECT_FALSE(is_graph_eligible(decode_batch({5, 101}), policy()));  // longer than max_seq_len_to_capture
  EXPECT_FALSE(is_graph_eligible(BatchContext{}, policy()));
}

TEST(GraphEligibility, PrefillAndMixedBatchesRunEagerly) {
  // One sequence with a 3-token prompt chunk.
  BatchContext prefill = make_single_sequence_batch(std::vector<int32_t>{1, 2, 3}, 0, 16);
  EXPECT_FALSE(is_graph_eligible(prefill, policy()));
  // A decode next to a 2-token chunk: 3 tokens for 2 sequences.
  BatchContext mixed = decode_batch({5, 9});
  mixed.token_ids.push_back(1);
  mixed.positions.push_back(9);
  mixed.slot_mapping.push_back(0);
  mixed.query_start_loc = {0, 1, 3};
  EXPECT_FALSE(is_graph_eligible(mixed, policy()));
  // A one-token prompt at position 0 is a decode-shaped step and may replay.
  EXPECT_TRUE(is_graph_eligible(make_single_sequence_batch(std::vector<int32_t>{7}, 0, 16), policy()));
}

// No graphs on the CPU backend: --enforce-eager false there runs the same eager forward.
TEST(GraphEligibility, CpuRunnerRunsEagerlyWithGraphsRequested) {
  ModelRunnerOptions o;
  o.model_dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  o.load.dtype = "float32";
  o.threads = 1;
  ModelRunner eager(o);
  o.enforce_eager = false;
  ModelRunner requested(o);
  EXPECT_EQ(requested.num_cuda_graphs(), 0);
  const int32_t tok[] = {1};
  const Logits a = eager.execute(make_single_sequence_batch(tok, 0, eager.block_size()));
  const Logits b = requested.execute(make_single_sequence_batch(tok, 0, requested.block_size()));
  EXPECT_EQ(a.data, b.data);
}

}  // namespace
}  // namespace cypris
