// CPU kernels for the element-wise and row-wise ops of a decoder layer. Activations are fp32;
// tables and weights may be F32/F16/BF16. Row strides are in elements so callers can pass
// column slices of a fused projection (q, k and v inside one qkv output) without copying.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

class ThreadPool;

// out[t, :] = table[ids[t], :] as fp32. ids must be in [0, vocab) (checked: throws Error).
void embedding_cpu(const int32_t* ids, int64_t num_tokens, const void* table, DType table_dtype, int64_t vocab,
                   int64_t hidden, float* out, ThreadPool* pool);

// out = x / sqrt(mean(x²) + eps) * weight, per row of `hidden` elements.
void rms_norm_cpu(const float* x, const float* weight, float eps, int64_t rows, int64_t hidden, float* out,
                  ThreadPool* pool);

// residual += x; x = rms_norm(residual) (vLLM's fused_add_rms_norm, in place).
void fused_add_rms_norm_cpu(float* x, float* residual, const float* weight, float eps, int64_t rows, int64_t hidden,
                            ThreadPool* pool);

// LayerNorm per row of `hidden` elements: out = (x - mean) / sqrt(var + eps) * weight (+ bias; null:
// none), statistics in double (Cohere's norms; the reference of layer_norm_cuda).
void layer_norm_cpu(const float* x, const float* weight, const float* bias, float eps, int64_t rows, int64_t hidden,
                    float* out, ThreadPool* pool);

// Neox-style (rotate_half) rotary embedding applied in place to the first rot_dim dims of each
// head. q: [num_tokens, num_q_heads, head_dim] with row stride ldq (elements per token), k likewise.
// cos_sin: [max_pos, rot_dim] = rot_dim/2 cosines then rot_dim/2 sines per position.
void rotary_cpu(float* q, int64_t ldq, int num_q_heads, float* k, int64_t ldk, int num_kv_heads, int head_dim,
                int rot_dim, const int32_t* positions, int64_t num_tokens, const float* cos_sin, int64_t max_pos,
                ThreadPool* pool);

// RMSNorm of each head_dim-wide head in place (Qwen3 / Gemma 3 q and k norms): x [rows, heads *
// head_dim] with row stride ld, weight [head_dim].
void rms_norm_heads_cpu(float* x, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight, float eps,
                        ThreadPool* pool);

// LayerNorm without bias of each head in place (Command R+'s q and k norms, computed in fp32 as
// transformers' CohereLayerNorm): x [rows, heads * head_dim] with row stride ld, weight
// [heads, head_dim] (one row per head).
void layer_norm_heads_cpu(float* x, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight, float eps,
                          ThreadPool* pool);

// out[t, i] = gelu_tanh(x[t, i]) * x[t, inter + i] (Gemma's GeGLU, tanh approximation).
void gelu_tanh_and_mul_cpu(const float* x, int64_t num_tokens, int64_t inter, float* out, ThreadPool* pool);

// x = cap * tanh(scale * x / cap) when cap > 0, else scale * x, in place on [rows, cols] with row
// stride ld (Gemma's embedding scaling and logit soft-capping, Cohere's logit scale).
void scale_and_cap_cpu(float* x, int64_t rows, int64_t cols, int64_t ld, float scale, float cap, ThreadPool* pool);

// out[t, i] = silu(x[t, i]) * x[t, inter + i]; x: [num_tokens, 2 * inter], out: [num_tokens, inter].
void silu_and_mul_cpu(const float* x, int64_t num_tokens, int64_t inter, float* out, ThreadPool* pool);

// out[r, :] = x[indices[r], :] for hidden-wide fp32 rows.
void gather_rows_cpu(const float* x, int64_t num_rows_x, int64_t hidden, const int32_t* indices, int64_t count,
                     float* out);

// out[indices[r], :] += weights[r] * src[r, :] for hidden-wide fp32 rows; indices in [0, rows_out)
// (checked), distinct within one call.
void scatter_add_rows_cpu(const float* src, int64_t count, int64_t hidden, const int32_t* indices, const float* weights,
                          float* out, int64_t rows_out);

// out[r] = index of the largest x[r, :] (first on ties, NaNs skipped; 0 for an all-NaN row).
// The reference for the GPU argmax (greedy sampling); x: [rows, vocab] with row stride ld.
// out[r, :] += x[r, :] for rows of `cols` elements with row strides ldx and ldo.
void add_rows_cpu(const float* x, int64_t ldx, float* out, int64_t ldo, int64_t rows, int64_t cols);

void argmax_rows_cpu(const float* x, int64_t rows, int64_t vocab, int64_t ld, int32_t* out);

}  // namespace cypris
