// CPU GEMM for linear layers: y = x · Wᵀ (+ bias) with fp32 activations and weights stored as
// F32, F16 or BF16. 16-bit weights stay 16-bit in memory. Decode-sized products (m <= 8 with
// AVX-512, m <= 4 with AVX2) convert each weight row in registers and stream the weights once
// (prefetched ahead on AVX-512); larger 16-bit products on AVX-512 run 6 x 4 register tiles over
// weights widened to fp32 one 4-row k block at a time (in L1, no packing). F32 weights, and 16-bit ones without AVX-512, go to OpenBLAS
// cblas_sgemm (16-bit tiles converted to fp32 first), one tile per pool task. Block-quantized
// weights go through kernels/cpu/quant/quant_gemm.h.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/common/gemm_group.h"

namespace cypris {

class ThreadPool;

// x: [m, k] fp32 with row stride ldx; w: [n, k] row-major in w_dtype; bias: [n] fp32 or null;
// y: [m, n] fp32 with row stride ldy.
void gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
              const float* bias, float* y, int64_t ldy, ThreadPool* pool);

// For each group: y[first, first + rows) = x[first, first + rows) · wᵀ (no bias), every group's w
// [n, k] in w_dtype; x and y as gemm_xwt. Decode-sized groups (the experts of a MoE layer at decode)
// share one pass over the pool instead of a parallel_for each; larger groups run gemm_xwt.
void gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups,
                      DType w_dtype, int64_t n, float* y, int64_t ldy, ThreadPool* pool);

// Converts count elements of F32/F16/BF16 to fp32 (vectorised where the CPU allows).
void convert_to_f32(const void* src, DType dtype, float* dst, int64_t count);

// Converts count fp32 values to F32/F16/BF16 (round to nearest even).
void convert_from_f32(const float* src, DType dtype, void* dst, int64_t count);

// The BLAS threads are pinned to one: parallelism comes from the pool, not from OpenBLAS.
void init_blas_single_threaded();

}  // namespace cypris
