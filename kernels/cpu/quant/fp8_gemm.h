// Linear layers with FP8 weights (DType::F8G128, kernels/common/fp8_blocks.h), kept in 8 bits in
// memory and dequantized inside the dot product: y = x · Wᵀ (+ bias) with fp32 activations.
//
// The activations are not quantized: FP8 checkpoints (and -q fp8) say how a GPU would quantize
// them (static input_scale or dynamic per token), but on the CPU an fp32 activation is both exact
// and no slower, since the kernel is bound by reading the weights. Per block of 128 the kernel sums
// fp8(q_i) · x_i in fp32 and multiplies the sum by the block scale once.
#pragma once

#include <cstdint>

#include "kernels/common/gemm_group.h"
#include "kernels/cpu/quant/quant_dot.h"

namespace cypris {

class ThreadPool;

namespace quant {

// Dequantizes n values (a whole number of 128-value blocks) of F8G128 into fp32: fp8 · d, exactly
// the fp32 product.
void dequantize_f8_row(const void* src, float* dst, int64_t n);

// out[r] = w_row · x[r] for r < nrows (<= kMaxDotRows), x[r] fp32 rows of k values.
using F8DotFn = void (*)(const void* w_row, const float* const* x, int nrows, int64_t k, float* out);
F8DotFn f8_dot_fn(Isa isa);

}  // namespace quant

// x: [m, k] fp32, row stride ldx; w: [n, k] F8G128; bias [n] or null; y: [m, n], row stride ldy.
void f8_gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, const float* bias,
                 float* y, int64_t ldy, ThreadPool* pool, quant::Isa isa);

// The grouped form (MoE experts): as quant_gemm_xwt_grouped.
void f8_gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups, int64_t n,
                         float* y, int64_t ldy, ThreadPool* pool);

}  // namespace cypris
