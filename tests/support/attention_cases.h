// Paged-attention test batches shared by the CPU and GPU kernel tests: the block layout of a batch
// (query offsets, context lengths, block tables) and the attention parameters that follow from it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace cypris::testing_support {

// A batch of sequences in a paged KV cache of [num_blocks, block_size, num_kv_heads, head_dim].
struct PagedBatch {
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  std::vector<int32_t> query_start_loc{0};  // [num_seqs + 1]
  std::vector<int32_t> seq_lens;            // [num_seqs], context length including the new tokens
  std::vector<int32_t> block_tables;        // [num_seqs, max_blocks_per_seq]
  int num_seqs = 0;
  int64_t num_tokens = 0, num_blocks = 0, max_blocks_per_seq = 0;
  int max_query_len = 0, max_seq_len = 0;

  int64_t kv_row() const { return int64_t{num_kv_heads} * head_dim; }
  int64_t q_row() const { return int64_t{num_heads} * head_dim; }
  int64_t num_slots() const { return num_blocks * block_size; }
  int query_len(int s) const { return query_start_loc[s + 1] - query_start_loc[s]; }
  // The block holding position `pos` of sequence s.
  int32_t block_of(int s, int pos) const { return block_tables[s * max_blocks_per_seq + pos / block_size]; }
};

// The batch's lengths from (new tokens, context length) per sequence; block tables left empty.
inline PagedBatch paged_batch_lengths(int head_dim, int num_heads, int num_kv_heads, int block_size,
                                      const std::vector<std::pair<int, int>>& seqs) {
  PagedBatch b;
  b.head_dim = head_dim;
  b.num_heads = num_heads;
  b.num_kv_heads = num_kv_heads;
  b.block_size = block_size;
  for (auto [q, ctx] : seqs) {
    b.query_start_loc.push_back(b.query_start_loc.back() + q);
    b.seq_lens.push_back(ctx);
    b.max_seq_len = std::max(b.max_seq_len, ctx);
    b.max_query_len = std::max(b.max_query_len, q);
  }
  b.num_seqs = static_cast<int>(seqs.size());
  b.num_tokens = b.query_start_loc.back();
  return b;
}

// Each sequence gets a shuffled set of distinct blocks, with 3 blocks no sequence uses.
inline PagedBatch shuffled_paged_batch(int head_dim, int num_heads, int num_kv_heads, int block_size,
                                       const std::vector<std::pair<int, int>>& seqs) {
  PagedBatch b = paged_batch_lengths(head_dim, num_heads, num_kv_heads, block_size, seqs);
  b.max_blocks_per_seq = (b.max_seq_len + block_size - 1) / block_size;
  b.num_blocks = b.max_blocks_per_seq * b.num_seqs + 3;
  std::vector<int32_t> ids(b.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(20));
  b.block_tables.assign(ids.begin(), ids.begin() + b.num_seqs * b.max_blocks_per_seq);
  return b;
}

// The CPU kernel tests' batch: a prefill chunk with context (5 new of 13), a fresh prefill (6) and a
// decode (1 new of 9), 4 query heads over 2 KV heads of 16, blocks of 4 in a 16-block cache, with
// hand-picked block tables (unused entries 0).
inline PagedBatch mixed_paged_batch() {
  PagedBatch b = paged_batch_lengths(16, 4, 2, 4, {{5, 13}, {6, 6}, {1, 9}});
  const std::vector<std::vector<int32_t>> tables = {{3, 9, 0, 12}, {5, 1}, {15, 2, 7}};
  b.num_blocks = 16;
  b.max_blocks_per_seq = 4;
  b.block_tables.assign(3 * 4, 0);
  for (int s = 0; s < 3; ++s) std::copy(tables[s].begin(), tables[s].end(), b.block_tables.begin() + s * 4);
  return b;
}

// Copies the batch's shape and the given metadata arrays (host for the CPU kernel, device for the
// CUDA one) into PagedAttentionParams or PagedAttentionCudaParams.
template <typename Params>
void set_paged_batch(Params& p, const PagedBatch& b, const int32_t* query_start_loc, const int32_t* seq_lens,
                     const int32_t* block_tables) {
  p.num_blocks = b.num_blocks;
  p.block_size = b.block_size;
  p.num_heads = b.num_heads;
  p.num_kv_heads = b.num_kv_heads;
  p.head_dim = b.head_dim;
  p.query_start_loc = query_start_loc;
  p.seq_lens = seq_lens;
  p.block_tables = block_tables;
  p.max_blocks_per_seq = b.max_blocks_per_seq;
  p.num_seqs = b.num_seqs;
  if constexpr (requires { p.num_tokens; }) {
    p.num_tokens = b.num_tokens;
    p.max_query_len = b.max_query_len;
    p.max_seq_len = b.max_seq_len;
  }
}

// The same with the batch's own host arrays (which must outlive the parameters).
template <typename Params>
void set_paged_batch(Params& p, const PagedBatch& b) {
  set_paged_batch(p, b, b.query_start_loc.data(), b.seq_lens.data(), b.block_tables.data());
}

}  // namespace cypris::testing_support
