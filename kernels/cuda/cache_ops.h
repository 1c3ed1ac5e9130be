// Launchers for the paged KV cache on the GPU: writing new K/V rows into their slots
// (reshape_and_cache, alone or fused with the rotary of q and k) and copying whole blocks inside the cache (copy-on-write after a fork).
// CPU references: write_kv_cache_cpu (kernels/cpu/attention.h) and the block memcpys of
// engine/runtime/kv_block_ops.cpp. Cache layout per layer: [num_blocks, block_size, num_kv_heads, head_dim],
// fp32, bf16 / fp16, or fp8 (one byte per element, kernels/common/fp8.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// k_cache[slot] = k[t], v_cache[slot] = v[t] for every token with 0 <= slot_mapping[t] < num_slots
// (a negative slot is padding; the runner validates the upper bound on the host).
// k, v: [num_tokens, kv_width] of io_dtype (F32, BF16 or F16) with row strides ldk, ldv (elements).
// cache_dtype F32 / BF16 / F16 stores the value rounded to nearest even (a copy when the types match;
// scales ignored); F8E4M3 / F8E5M2 store fp8(k / k_scale) and fp8(v / v_scale). For fp32 inputs every
// cache type is bit-identical to write_kv_cache_cpu.
void reshape_and_cache_cuda(const void* k, int64_t ldk, const void* v, int64_t ldv, DType io_dtype, int64_t num_tokens,
                            const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache,
                            int64_t num_slots, cudaStream_t stream, DType cache_dtype, float k_scale, float v_scale);

// rotary_cuda (kernels/cuda/rotary.h) on q and k followed by reshape_and_cache_cuda of the rotated
// k and of v, in one launch: the same values and bytes as the two calls.
struct RotaryCacheArgs {
  void* q = nullptr;        // [num_tokens, num_q_heads * head_dim], row stride ldq, rotated in place
  int64_t ldq = 0;
  void* k = nullptr;        // [num_tokens, num_kv_heads * head_dim], row stride ldk, rotated in place
  int64_t ldk = 0;
  const void* v = nullptr;  // [num_tokens, num_kv_heads * head_dim], row stride ldv
  int64_t ldv = 0;
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0, rot_dim = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* cos_sin = nullptr;      // [max_pos, rot_dim]: cos then sin halves
  int64_t max_pos = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t num_slots = 0;
  int64_t num_tokens = 0;
};
void rotary_and_cache_cuda(const RotaryCacheArgs& args, DType io_dtype, DType cache_dtype, float k_scale, float v_scale,
                           cudaStream_t stream);

// For every cache tensor c (device pointers in cache_ptrs[num_caches], itself in device memory)
// and every pair p: block pairs[2p + 1] of c = block pairs[2p] of c. block_bytes is the size of
// one block; pairs are device memory [num_pairs, 2]. Blocks must not overlap between pairs.
void copy_blocks_cuda(const uint64_t* cache_ptrs, int num_caches, const int64_t* pairs, int64_t num_pairs,
                      int64_t block_bytes, cudaStream_t stream);

}  // namespace cypris
