// Launcher for the rotary embedding on the GPU. Like the CPU backend it takes a precomputed
// cos/sin table, so every RoPE variant the model config supports (default, linear, dynamic NTK,
// YaRN, Llama 3, partial rotary) is the same kernel. CPU reference: rotary_cpu in kernels/cpu/ops.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// Neox-style (rotate_half) rotation in place of the first rot_dim dims of each head.
// q: [num_tokens, num_q_heads * head_dim] with row stride ldq; k likewise with ldk.
// cos_sin: [max_pos, rot_dim] (rot_dim/2 cosines, then rot_dim/2 sines). Rows whose position is
// outside [0, max_pos) are left unchanged (the runner validates positions before the forward).
// q and k are of `dtype` (F32, F16 or BF16; fp32 arithmetic).
void rotary_cuda(void* q, int64_t ldq, int num_q_heads, void* k, int64_t ldk, int num_kv_heads, DType dtype,
                 int head_dim, int rot_dim, const int32_t* positions, int64_t num_tokens, const float* cos_sin,
                 int64_t max_pos, cudaStream_t stream);

}  // namespace cypris
