// Launchers for RMSNorm and the fused residual-add + RMSNorm on the GPU. Activations are F32,
// F16 or BF16 (`dtype`), the weight fp32, arithmetic fp32. CPU reference: kernels/cpu/ops.h
// (rms_norm_cpu, fused_add_rms_norm_cpu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// out = x / sqrt(mean(x²) + eps) * weight, per row of `hidden` contiguous elements.
void rms_norm_cuda(const void* x, DType dtype, const float* weight, float eps, int64_t rows, int64_t hidden, void* out,
                   cudaStream_t stream);

// residual += x (rounded to dtype); x = rms_norm(residual) * weight (in place, vLLM's fused_add_rms_norm).
void fused_add_rms_norm_cuda(void* x, void* residual, DType dtype, const float* weight, float eps, int64_t rows,
                             int64_t hidden, cudaStream_t stream);

// RMSNorm of each head in place: x [rows, heads * head_dim] with row stride ld, weight [head_dim]
// (Qwen3 / Gemma 3 q and k norms). CPU reference: rms_norm_heads_cpu.
void rms_norm_heads_cuda(void* x, DType dtype, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight,
                         float eps, cudaStream_t stream);

// LayerNorm without bias of each head in place, weight [heads, head_dim] (Command R+'s q and k
// norms). CPU reference: layer_norm_heads_cpu.
void layer_norm_heads_cuda(void* x, DType dtype, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight,
                           float eps, cudaStream_t stream);

}  // namespace cypris
