// Linear layers with bitsandbytes 4-bit weights (DType::NF4G64 / FP4G64, kernels/common/bnb_blocks.h),
// kept in 4 bits in memory and dequantized inside the dot product: y = x · Wᵀ (+ bias) with fp32
// activations.
//
// NF4 and FP4 values are 16 table entries, not integers, so there is no integer dot to run: per
// block of 64 the kernel looks each code up in the 16-float table (AVX-512: one vpermps of the
// table per 16 codes; AVX2: two vpermps of its halves and a blend on the code's bit 3), sums
// table[q_i] · x_i in fp32 with FMAs and multiplies the block sum by the absmax once. The
// activations stay fp32 (exact); the kernel is bound by reading the weights.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/common/gemm_group.h"
#include "kernels/cpu/quant/quant_dot.h"

namespace cypris {

class ThreadPool;

namespace quant {

bool is_b4(DType t);
// The 16-value table of NF4G64 or FP4G64.
const float* b4_table(DType t);

// Dequantizes n values (a whole number of 64-value blocks): table[q] * d, exactly the fp32 product.
void dequantize_b4_row(DType t, const void* src, float* dst, int64_t n);

// out[r] = w_row · x[r] for r < nrows (<= kMaxDotRows), x[r] fp32 rows of k values. Isa::Avx512
// takes the AVX-512 F kernel wherever the CPU has AVX-512 F (VNNI is not needed).
using B4DotFn = void (*)(const void* w_row, const float* const* x, int nrows, int64_t k, float* out);
B4DotFn b4_dot_fn(DType t, Isa isa);

}  // namespace quant

// x: [m, k] fp32, row stride ldx; w: [n, k] NF4G64 or FP4G64; bias [n] or null; y: [m, n], stride ldy.
void b4_gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
                 const float* bias, float* y, int64_t ldy, ThreadPool* pool, quant::Isa isa);

// The grouped form (MoE experts): as quant_gemm_xwt_grouped.
void b4_gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups,
                         DType w_dtype, int64_t n, float* y, int64_t ldy, ThreadPool* pool);

}  // namespace cypris
