// Launchers for element-wise GPU ops around the linear layers: SiLU-and-mul, bias add, and the
// fp32 -> F16/BF16 conversion that feeds activations to the 16-bit tensor-core GEMM.
// CPU references: silu_and_mul_cpu (kernels/cpu/ops.h), convert_from_f32 (kernels/cpu/gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// out[t, i] = silu(x[t, i]) * x[t, inter + i]; x [num_tokens, 2 * inter], out [num_tokens, inter].
void silu_and_mul_cuda(const float* x, int64_t num_tokens, int64_t inter, float* out, cudaStream_t stream);

// out[t, i] = gelu_tanh(x[t, i]) * x[t, inter + i] (Gemma's GeGLU). CPU reference: gelu_tanh_and_mul_cpu.
void gelu_tanh_and_mul_cuda(const float* x, int64_t num_tokens, int64_t inter, float* out, cudaStream_t stream);

// In place on x [rows, cols] with row stride ld: cap * tanh(scale * x / cap) when cap > 0, else
// scale * x. CPU reference: scale_and_cap_cpu.
void scale_and_cap_cuda(float* x, int64_t rows, int64_t cols, int64_t ld, float scale, float cap,
                        cudaStream_t stream);

// y[m, n] += bias[n] for y [rows, cols] with row stride ldy.
void add_bias_cuda(float* y, int64_t rows, int64_t cols, int64_t ldy, const float* bias, cudaStream_t stream);

// dst [rows, cols] contiguous in dtype (F32/F16/BF16, round to nearest even) from src [rows, cols]
// fp32 with row stride ld_src.
void convert_from_f32_cuda(const float* src, int64_t rows, int64_t cols, int64_t ld_src, DType dtype, void* dst,
                           cudaStream_t stream);

// dst [count] fp32 from src [count] in F32/F16/BF16.
void convert_to_f32_cuda(const void* src, DType dtype, int64_t count, float* dst, cudaStream_t stream);

}  // namespace cypris
