// Launcher for causal attention over the paged KV cache on the GPU, for a flattened batch that
// mixes prefill chunks and decodes (GQA, optional sliding window). CPU reference:
// paged_attention_cpu in kernels/cpu/attention.h (same parameters, same semantics).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

struct PagedAttentionCudaParams {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride ldq
  int64_t ldq = 0;
  const void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] of cache_dtype
  const void* v_cache = nullptr;
  DType cache_dtype = DType::F32;  // F32, F8E4M3 or F8E5M2
  float k_scale = 1.0f;            // fp8 only: key = fp32(stored) * k_scale
  float v_scale = 1.0f;
  int64_t num_blocks = 0;
  int block_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // at most 256
  const int32_t* query_start_loc = nullptr;  // device [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // device [num_seqs]
  const int32_t* block_tables = nullptr;     // device [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  int num_seqs = 0;
  int64_t num_tokens = 0;
  // Host-side bounds used to size the grid (0: derive from num_tokens and the block table width).
  int max_query_len = 0;
  int max_seq_len = 0;
  float scale = 1.0f;
  int sliding_window = 0;  // > 0: a query at position p sees keys in (p - window, p]
  float* out = nullptr;    // [num_tokens, num_heads, head_dim], row stride ldo
  int64_t ldo = 0;
};

// Bytes of scratch memory paged_attention_cuda needs for these parameters (split-K partials).
size_t paged_attention_workspace_bytes(const PagedAttentionCudaParams& p);

// workspace: device memory of at least paged_attention_workspace_bytes(p) bytes (may be null when 0).
// Metadata must be consistent (the runner validates the batch on the host first).
void paged_attention_cuda(const PagedAttentionCudaParams& p, void* workspace, cudaStream_t stream);

}  // namespace cypris
