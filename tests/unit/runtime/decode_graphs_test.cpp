// The pure parts of CUDA-graph decode: capture sizes, padding, and which batches may replay a graph;
// and that the CPU backend runs eagerly when graphs are asked for.
#include "engine/runtime/decode_graphs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/common/error.h"
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

TEST(PadDecodeBatch, PaddingRowsWriteNoKvAndKeepTheBatchsRowsFirst) {
  BatchContext b = decode_batch({5, 20, 17}, 16);  // 1, 2, 2 blocks used
  b.block_tables = {7, -1, 3, 4, 9, 2};
  b.slot_mapping = {116, 52, 32};
  b.logits_indices = {0, 2};  // the middle sequence wants no logits
  const BatchContext p = pad_decode_batch(b, 4, 3, 16);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{4, 19, 16, 0}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int64_t>{116, 52, 32, -1}));
  EXPECT_EQ(p.query_start_loc, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(p.seq_lens, (std::vector<int32_t>{5, 20, 17, 1}));
  EXPECT_EQ(p.max_blocks_per_seq, 3);
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{7, 0, 0, 3, 4, 0, 9, 2, 0, 0, 0, 0}));
  EXPECT_EQ(p.logits_indices, (std::vector<int32_t>{0, 2, 2, 3}));
  EXPECT_NO_THROW(p.validate(10, 16));
  EXPECT_THROW(pad_decode_batch(b, 2, 3, 16), Error);  // fewer rows than sequences
  EXPECT_THROW(pad_decode_batch(b, 4, 1, 16), Error);  // a 20-token context needs 2 table entries
  EXPECT_TRUE(p.lora_slots.empty());  // no adapters named: the graph runs the base model
  // With LoRA slots (CUDA graphs carry them in their input buffer): b's rows keep their adapters,
  // padding rows run the base model.
  b.lora_slots = {2, -1, 0};
  EXPECT_EQ(pad_decode_batch(b, 4, 3, 16).lora_slots, (std::vector<int32_t>{2, -1, 0, -1}));
}

// stories260k on the CPU: fp32, one thread, 12 KV blocks.
ModelRunnerOptions stories_options() {
  ModelRunnerOptions o;
  o.model_dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  o.load.dtype = "float32";
  o.threads = 1;
  o.num_blocks = 12;
  return o;
}

// Prefills seqs prompts (5, 12, 19, ... tokens), sequence s in blocks s * blocks ... s * blocks +
// blocks - 1 of block_size tokens; their lengths.
std::vector<int32_t> prefill_sequences(ModelRunner& r, int seqs, int blocks, int block_size) {
  std::vector<int32_t> lens(seqs);
  for (int s = 0; s < seqs; ++s) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 5 + 7 * s; ++i) prompt.push_back(1 + (s * 31 + i * 7) % 500);
    BatchContext b = make_single_sequence_batch(prompt, 0, block_size);
    b.max_blocks_per_seq = blocks;
    b.block_tables.clear();
    for (int k = 0; k < blocks; ++k) b.block_tables.push_back(s * blocks + k);
    for (auto& slot : b.slot_mapping) slot += s * blocks * block_size;
    r.execute(b);
    lens[s] = static_cast<int32_t>(prompt.size());
  }
  return lens;
}

// What a replayed graph computes, on the CPU: the padded batch gives the batch's logits, and its
// padding rows leave the cache alone (block 0 belongs to sequence 0 here, so a stray write would
// change the next step).
TEST(PadDecodeBatch, PaddedBatchGivesTheSameLogitsOnTheCpu) {
  ModelRunner plain(stories_options()), padded(stories_options());
  constexpr int kSeqs = 3, kBlocks = 4, kBs = 16;
  std::vector<int32_t> lens;
  for (ModelRunner* r : {&plain, &padded}) lens = prefill_sequences(*r, kSeqs, kBlocks, kBs);
  for (int step = 0; step < 3; ++step) {
    for (auto& l : lens) ++l;
    BatchContext b = decode_batch(lens, kBs);
    b.max_blocks_per_seq = kBlocks;
    b.block_tables.clear();
    for (int s = 0; s < kSeqs; ++s) {
      b.token_ids[s] = 3 + 11 * s + step;
      b.slot_mapping[s] = s * kBlocks * kBs + lens[s] - 1;
      for (int k = 0; k < kBlocks; ++k) b.block_tables.push_back(s * kBlocks + k);
    }
    const Logits want = plain.execute(b);
    const Logits got = padded.execute(pad_decode_batch(b, 8, 6, kBs));
    ASSERT_EQ(got.rows, 8);
    for (int s = 0; s < kSeqs; ++s) {
      for (int64_t v = 0; v < want.vocab; ++v) {
        ASSERT_NEAR(got.row(s)[v], want.row(s)[v], 1e-5f * (1.0f + std::abs(want.row(s)[v])))
            << "step " << step << " seq " << s << " token " << v;
      }
    }
  }
}

// n sequences verifying different numbers of drafts: qs[s] new tokens for sequence s (its last
// token and qs[s] - 1 drafts), a logits row per token.
BatchContext mixed_verify_batch(const std::vector<int32_t>& lens, const std::vector<int>& qs, int block_size = 16) {
  BatchContext b;
  int32_t max_blocks = 0;
  for (int32_t l : lens) max_blocks = std::max(max_blocks, (l + block_size - 1) / block_size);
  b.max_blocks_per_seq = max_blocks;
  b.query_start_loc.push_back(0);
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int t = 0; t < qs[s]; ++t) {
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.token_ids.push_back(1 + t);
      b.positions.push_back(lens[s] - qs[s] + t);
      b.slot_mapping.push_back(0);
    }
    b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.seq_lens.push_back(lens[s]);
    b.max_query_len = std::max(b.max_query_len, qs[s]);
    b.max_seq_len = std::max(b.max_seq_len, lens[s]);
    for (int32_t k = 0; k < max_blocks; ++k) b.block_tables.push_back(0);
  }
  return b;
}

// n sequences each verifying q - 1 drafts: q new tokens each, a logits row per token.
BatchContext verify_batch(const std::vector<int32_t>& lens, int q, int block_size = 16) {
  return mixed_verify_batch(lens, std::vector<int>(lens.size(), q), block_size);
}

TEST(GraphEligibility, VerifyStepsWithOneDraftLengthReplayUpToEightSequences) {
  DecodeGraphPolicy spec = policy();
  spec.max_query_len = 5;  // k = 4
  EXPECT_EQ(graph_sizes_for(spec, 1), spec.sizes);
  EXPECT_EQ(graph_sizes_for(spec, 5), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_TRUE(graph_sizes_for(spec, 6).empty());
  EXPECT_EQ(max_graph_tokens(spec), 256);
  EXPECT_TRUE(is_graph_eligible(verify_batch({10}, 5), spec));
  EXPECT_TRUE(is_graph_eligible(verify_batch({10, 30, 7}, 2), spec));
  EXPECT_TRUE(is_graph_eligible(verify_batch(std::vector<int32_t>(8, 9), 3), spec));
  EXPECT_FALSE(is_graph_eligible(verify_batch(std::vector<int32_t>(9, 9), 3), spec));  // no graph of 9+ sequences
  EXPECT_FALSE(is_graph_eligible(verify_batch({10}, 6), spec));                       // more than k + 1 tokens
  EXPECT_FALSE(is_graph_eligible(verify_batch({10}, 2), policy()));                   // no speculation: no such graph
  // A query_start_loc that does not describe the tokens runs eagerly.
  BatchContext broken = verify_batch({10, 12}, 3);
  broken.query_start_loc = {0, 2, 6};
  broken.token_ids.push_back(1);
  broken.positions.push_back(11);
  broken.slot_mapping.push_back(0);
  EXPECT_EQ(uniform_query_len(broken), 0);
  EXPECT_EQ(graph_query_len(broken), 0);
  EXPECT_FALSE(is_graph_eligible(broken, spec));
  // One sequence of max_num_seqs 1: a graph of k + 1 tokens still exists (up to 64 tokens).
  DecodeGraphPolicy one = policy(1);
  one.max_query_len = 5;
  EXPECT_EQ(graph_sizes_for(one, 5), (std::vector<int>{1}));
  EXPECT_EQ(max_graph_tokens(one), 5);
}

TEST(PadDecodeBatch, VerifyStepsPadWithWholeSequencesOfQTokens) {
  BatchContext b = verify_batch({5, 20}, 3, 16);
  b.block_tables = {7, -1, 3, 4};
  b.slot_mapping = {114, 115, 116, 49, 50, 51};
  const BatchContext p = pad_decode_batch(b, 4, 2, 16, 3);
  EXPECT_EQ(p.max_query_len, 3);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{1, 2, 3, 1, 2, 3, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{2, 3, 4, 17, 18, 19, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int64_t>{114, 115, 116, 49, 50, 51, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(p.query_start_loc, (std::vector<int32_t>{0, 3, 6, 9, 12}));
  EXPECT_EQ(p.seq_lens, (std::vector<int32_t>{5, 20, 3, 3}));
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{7, 0, 3, 4, 0, 0, 0, 0}));
  EXPECT_EQ(p.logits_indices, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_NO_THROW(p.validate(10, 16));
  EXPECT_THROW(pad_decode_batch(b, 4, 2, 16, 2), Error);  // 6 tokens are not 2 sequences of 2
}


TEST(GraphEligibility, VerifyStepsWithMixedDraftLengthsReplayTheLongestsGraph) {
  // The adaptive draft length gives sequences of one step different numbers of drafts (and a
  // sequence without drafts 1 token): the batch replays the graph of its longest.
  DecodeGraphPolicy spec = policy();
  spec.max_query_len = 5;  // k = 4
  const BatchContext mixed = mixed_verify_batch({10, 30, 7}, {2, 5, 1});
  EXPECT_EQ(uniform_query_len(mixed), 0);
  EXPECT_EQ(graph_query_len(mixed), 5);
  EXPECT_TRUE(is_graph_eligible(mixed, spec));
  EXPECT_TRUE(is_graph_eligible(mixed_verify_batch({9, 9, 9, 9, 9, 9, 9, 9}, {1, 2, 3, 4, 5, 4, 3, 2}), spec));
  // Without speculation (graphs of 1 token only), or past k + 1 tokens, or 9 sequences: eager.
  EXPECT_FALSE(is_graph_eligible(mixed, policy()));
  EXPECT_FALSE(is_graph_eligible(mixed_verify_batch({10, 30}, {2, 6}), spec));
  EXPECT_FALSE(is_graph_eligible(mixed_verify_batch(std::vector<int32_t>(9, 9), {1, 2, 3, 4, 5, 4, 3, 2, 1}), spec));
  // The padding in front of a shorter sequence sits on its cached positions: a context of fewer
  // tokens than the longest sequence's new ones has none to spare.
  EXPECT_FALSE(is_graph_eligible(mixed_verify_batch({10, 4}, {5, 2}), spec));
  EXPECT_TRUE(is_graph_eligible(mixed_verify_batch({10, 5}, {5, 2}), spec));
  // A logits row naming a token outside the batch: eager (where the runner reports it).
  BatchContext bad = mixed_verify_batch({10, 30}, {2, 3});
  bad.logits_indices.back() = 5;
  EXPECT_FALSE(is_graph_eligible(bad, spec));
}

TEST(PadDecodeBatch, MixedDraftLengthsArePaddedInFrontWithMaskedTokens) {
  // Sequence 0 verifies 1 draft (2 tokens), sequence 1 none (1 token), padded to 3 tokens each:
  // the padding goes before each sequence's new tokens, at the cached positions just before them,
  // writing no KV; the new tokens keep their positions and slots, and their logits rows follow them.
  BatchContext b = mixed_verify_batch({5, 20}, {2, 1}, 16);
  b.block_tables = {7, -1, 3, 4};
  b.slot_mapping = {115, 116, 51};
  b.logits_indices = {0, 1, 2};
  const BatchContext p = pad_decode_batch(b, 4, 2, 16, 3);
  EXPECT_EQ(p.max_query_len, 3);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{0, 1, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{2, 3, 4, 17, 18, 19, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int64_t>{-1, 115, 116, -1, -1, 51, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(p.query_start_loc, (std::vector<int32_t>{0, 3, 6, 9, 12}));
  EXPECT_EQ(p.seq_lens, (std::vector<int32_t>{5, 20, 3, 3}));
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{7, 0, 3, 4, 0, 0, 0, 0}));
  EXPECT_EQ(p.logits_indices, (std::vector<int32_t>{1, 2, 5, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_NO_THROW(p.validate(10, 16));
  // Only some rows: sequence 1's row alone lands on its token.
  b.logits_indices = {2};
  EXPECT_EQ(pad_decode_batch(b, 2, 2, 16, 3).logits_indices, (std::vector<int32_t>{5, 1, 2, 3, 4, 5}));
  EXPECT_THROW(pad_decode_batch(b, 2, 2, 16, 1), Error);  // fewer tokens than sequence 0's
  // A context of 2 tokens has no room for 2 padding tokens in front of its new one (positions -1, 0).
  const BatchContext tiny = mixed_verify_batch({6, 2}, {3, 1});
  EXPECT_THROW(pad_decode_batch(tiny, 2, 1, 16, 3), Error);
}

// What a replayed verify graph computes, on the CPU: the padded batch of q tokens per sequence
// gives every verified position's logits, and its padding writes no KV.
TEST(PadDecodeBatch, PaddedVerifyBatchGivesTheSameLogitsOnTheCpu) {
  ModelRunner plain(stories_options()), padded(stories_options());
  constexpr int kSeqs = 3, kBlocks = 4, kBs = 16, kQ = 3;
  std::vector<int32_t> lens;
  for (ModelRunner* r : {&plain, &padded}) lens = prefill_sequences(*r, kSeqs, kBlocks, kBs);
  for (int step = 0; step < 3; ++step) {
    for (auto& l : lens) l += kQ;
    BatchContext b = verify_batch(lens, kQ, kBs);
    b.max_blocks_per_seq = kBlocks;
    b.block_tables.clear();
    for (int s = 0; s < kSeqs; ++s) {
      for (int t = 0; t < kQ; ++t) {
        b.token_ids[static_cast<size_t>(s * kQ + t)] = 3 + 11 * s + 5 * t + step;
        b.slot_mapping[static_cast<size_t>(s * kQ + t)] = s * kBlocks * kBs + lens[s] - kQ + t;
      }
      for (int k = 0; k < kBlocks; ++k) b.block_tables.push_back(s * kBlocks + k);
    }
    const Logits want = plain.execute(b);
    const Logits got = padded.execute(pad_decode_batch(b, 4, 6, kBs, kQ));
    ASSERT_EQ(got.rows, 4 * kQ);
    for (int r = 0; r < kSeqs * kQ; ++r) {
      for (int64_t v = 0; v < want.vocab; ++v) {
        ASSERT_NEAR(got.row(r)[v], want.row(r)[v], 1e-5f * (1.0f + std::abs(want.row(r)[v])))
            << "step " << step << " row " << r << " token " << v;
      }
    }
  }
}

// What a replayed graph computes for sequences with different numbers of drafts, on the CPU: the
// batch padded to its longest sequence (masked tokens in front of the shorter ones) gives every
// verified position's logits, step after step (its padding writes no KV: the next steps read it).
TEST(PadDecodeBatch, PaddedMixedVerifyBatchGivesTheSameLogitsOnTheCpu) {
  ModelRunner plain(stories_options()), padded(stories_options());
  constexpr int kSeqs = 3, kBlocks = 4, kBs = 16, kQ = 4;
  std::vector<int32_t> lens;
  for (ModelRunner* r : {&plain, &padded}) lens = prefill_sequences(*r, kSeqs, kBlocks, kBs);
  const std::vector<std::vector<int>> steps = {{1, 4, 2}, {3, 1, 4}, {2, 2, 1}, {4, 3, 1}};
  for (size_t step = 0; step < steps.size(); ++step) {
    const std::vector<int>& qs = steps[step];
    for (int s = 0; s < kSeqs; ++s) lens[s] += qs[s];
    BatchContext b = mixed_verify_batch(lens, qs, kBs);
    b.max_blocks_per_seq = kBlocks;
    b.block_tables.clear();
    for (int s = 0, at = 0; s < kSeqs; ++s) {
      for (int t = 0; t < qs[s]; ++t, ++at) {
        b.token_ids[static_cast<size_t>(at)] = 3 + 11 * s + 5 * t + static_cast<int>(step);
        b.slot_mapping[static_cast<size_t>(at)] = s * kBlocks * kBs + lens[s] - qs[s] + t;
      }
      for (int k = 0; k < kBlocks; ++k) b.block_tables.push_back(s * kBlocks + k);
    }
    ASSERT_GE(graph_query_len(b), 2);
    const int q = graph_query_len(b);
    const Logits want = plain.execute(b);
    const Logits got = padded.execute(pad_decode_batch(b, 4, 6, kBs, q));
    ASSERT_EQ(got.rows, 4 * q);
    for (int r = 0; r < b.num_tokens(); ++r) {
      for (int64_t v = 0; v < want.vocab; ++v) {
        ASSERT_NEAR(got.row(r)[v], want.row(r)[v], 1e-5f * (1.0f + std::abs(want.row(r)[v])))
            << "step " << step << " row " << r << " token " << v;
      }
    }
  }
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
