// Launchers for element-wise GPU ops around the linear layers: SiLU/GELU-and-mul, scaling, bias
// add and dtype conversions. Activations are F32, F16 or BF16 (`dtype`), arithmetic is fp32.
// CPU references: silu_and_mul_cpu (kernels/cpu/ops.h), convert_from_f32 (kernels/cpu/gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace cypris {

// out[t, i] = silu(x[t, i]) * x[t, inter + i]; x [num_tokens, 2 * inter], out [num_tokens, inter],
// both contiguous of `dtype`.
void silu_and_mul_cuda(const void* x, DType dtype, int64_t num_tokens, int64_t inter, void* out,
                       cudaStream_t stream);

// out[t, i] = gelu_tanh(x[t, i]) * x[t, inter + i] (Gemma's GeGLU). CPU reference: gelu_tanh_and_mul_cpu.
void gelu_tanh_and_mul_cuda(const void* x, DType dtype, int64_t num_tokens, int64_t inter, void* out,
                            cudaStream_t stream);

// In place on x [rows, cols] with row stride ld: cap * tanh(scale * x / cap) when cap > 0, else
// scale * x. CPU reference: scale_and_cap_cpu.
void scale_and_cap_cuda(void* x, DType dtype, int64_t rows, int64_t cols, int64_t ld, float scale, float cap,
                        cudaStream_t stream);

// out[r, :] += x[r, :] for rows of `cols` elements of `dtype` with row strides ldx, ldo.
void add_rows_cuda(const void* x, int64_t ldx, void* out, int64_t ldo, DType dtype, int64_t rows, int64_t cols,
                   cudaStream_t stream);

// y[m, n] += bias[n] for y [rows, cols] of `dtype` with row stride ldy; bias fp32.
void add_bias_cuda(void* y, DType dtype, int64_t rows, int64_t cols, int64_t ldy, const float* bias,
                   cudaStream_t stream);

// dst [rows, cols] (row stride ld_dst) = src [rows, cols] (row stride ld_src), converted between
// F32/F16/BF16 (round to nearest even).
void convert_cuda(const void* src, DType src_dtype, int64_t rows, int64_t cols, int64_t ld_src, void* dst,
                  DType dst_dtype, int64_t ld_dst, cudaStream_t stream);

// dst [rows, cols] contiguous in dtype from src [rows, cols] fp32 with row stride ld_src.
void convert_from_f32_cuda(const float* src, int64_t rows, int64_t cols, int64_t ld_src, DType dtype, void* dst,
                           cudaStream_t stream);

// dst [count] fp32 from src [count] in F32/F16/BF16.
void convert_to_f32_cuda(const void* src, DType dtype, int64_t count, float* dst, cudaStream_t stream);

}  // namespace cypris
