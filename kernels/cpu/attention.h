// CPU attention over the paged KV cache: writing new K/V by slot, and causal attention with GQA
// and an optional sliding window for a flattened batch that mixes prefill chunks and decodes.
// Cache layout per layer: [num_blocks, block_size, num_kv_heads, head_dim], fp32, bf16 / fp16 (raw 16-bit
// words, round to nearest even on write) or fp8 (e4m3 / e5m2, one byte per element, conversions in
// kernels/common/fp8.h). An fp8 cache holds fp8(x / scale) and is read back as fp32(stored) * scale, with
// one scale for K and one for V per layer (vLLM's scheme); the scales are ignored for 32- and 16-bit caches.
// Each kernel has an AVX-512, an AVX2 (+FMA, F16C) and a plain C++ path, chosen at run time
// (attention_avx512.cpp, attention_avx2.cpp, kv_cache_write.cpp); all read and write the same values.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

class ThreadPool;

// True for the element types a KV cache may have: F32, F16, BF16, F8E4M3, F8E5M2.
bool is_kv_cache_dtype(DType t);

// The instruction set the attention and cache-write kernels run on. Auto: the best this CPU has
// (AVX-512 F/BW/DQ, else AVX2 + FMA + F16C, else plain C++). Naming one is for tests that compare the
// paths: a path this CPU lacks is refused (cpu_has_isa), and attention takes the next lower path for
// a head dim the named one cannot run (AVX-512: multiples of 16; AVX2: multiples of 8).
enum class CpuIsa { Auto, Avx512, Avx2, Scalar };
bool cpu_has_isa(CpuIsa isa);
const char* cpu_isa_name(CpuIsa isa);

// k_cache[slot] = k[t], v_cache[slot] = v[t] for each token with slot_mapping[t] >= 0 (a negative
// slot is padding and skipped). k, v: [num_tokens, num_kv_heads * head_dim] with row strides.
// cache_dtype F32: plain copies; F16 / BF16: rounded to nearest even (scales ignored for both); fp8:
// k / k_scale and v / v_scale, rounded to nearest even and saturated.
void write_kv_cache_cpu(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t num_tokens,
                        const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache, int64_t num_slots,
                        DType cache_dtype = DType::F32, float k_scale = 1.0f, float v_scale = 1.0f,
                        CpuIsa isa = CpuIsa::Auto);

struct PagedAttentionParams {
  const void* q = nullptr;  // [num_tokens, num_heads, head_dim] of io_dtype, row stride ldq (elements)
  int64_t ldq = 0;
  const void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] of cache_dtype
  const void* v_cache = nullptr;
  DType cache_dtype = DType::F32;  // F32, F16, BF16, F8E4M3 or F8E5M2
  float k_scale = 1.0f;            // fp8 only: key = fp32(stored) * k_scale
  float v_scale = 1.0f;
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
  float softcap = 0.0f;    // > 0: scores become softcap * tanh(score / softcap) (Gemma 2)
  void* out = nullptr;     // [num_tokens, num_heads, head_dim] of io_dtype, row stride ldo (elements)
  int64_t ldo = 0;
  DType io_dtype = DType::F32;  // element type of q and out: F32, BF16 or F16 (the CPU kernel takes F32 only)
  CpuIsa isa = CpuIsa::Auto;    // the CPU kernel's instruction set (tests; the CUDA kernel ignores it)
};

// The new tokens of sequence s are rows query_start_loc[s] .. query_start_loc[s+1] of q and sit at
// positions seq_len - q_len .. seq_len - 1; each attends causally to every earlier cached key.
// Throws Error when the metadata is inconsistent (lengths, block ids out of range).
void paged_attention_cpu(const PagedAttentionParams& p, ThreadPool* pool);

}  // namespace cypris
