// CPU attention over the paged KV cache: writing new K/V by slot, and causal attention with GQA
// and an optional sliding window for a flattened batch that mixes prefill chunks and decodes.
// Cache layout per layer: [num_blocks, block_size, num_kv_heads, head_dim] fp32.
#pragma once

#include <cstdint>

namespace cypris {

class ThreadPool;

// k_cache[slot] = k[t], v_cache[slot] = v[t] for each token with slot_mapping[t] >= 0 (a negative
// slot is padding and skipped). k, v: [num_tokens, num_kv_heads * head_dim] with row strides.
void write_kv_cache_cpu(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t num_tokens,
                        const int64_t* slot_mapping, int64_t kv_width, float* k_cache, float* v_cache,
                        int64_t num_slots);

struct PagedAttentionParams {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride ldq
  int64_t ldq = 0;
  const float* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const float* v_cache = nullptr;
  int64_t num_blocks = 0;
  int block_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]: context length including the new tokens
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  int num_seqs = 0;
  float scale = 1.0f;
  int sliding_window = 0;  // > 0: a query at position p sees keys in (p - window, p]
  float* out = nullptr;    // [num_tokens, num_heads, head_dim], row stride ldo
  int64_t ldo = 0;
};

// The new tokens of sequence s are rows query_start_loc[s] .. query_start_loc[s+1] of q and sit at
// positions seq_len - q_len .. seq_len - 1; each attends causally to every earlier cached key.
// Throws Error when the metadata is inconsistent (lengths, block ids out of range).
void paged_attention_cpu(const PagedAttentionParams& p, ThreadPool* pool);

}  // namespace cypris
