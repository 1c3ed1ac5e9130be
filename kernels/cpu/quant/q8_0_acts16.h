// Q8_0 weights against 16-bit activations. Q8_0 weights are 8-bit themselves, so 8-bit activations
// (one step = 1/127 of a block's largest value) would add about as much error again as the format
// has; with 16 bits per activation (1/32767 of the largest value of a group of 256, fp32 scale) a
// Q8_0 linear layer loses what its weights lose and little more, while each weight block's product
// stays an exact integer sum (|w| <= 127, |x| <= 32767: 32 products < 2^31).
//
// One activation scale per 256 values (8 weight blocks), not per 32: the kernels apply each weight
// block's scale in float lanes shared by all activation rows and each row's scale once per 8 blocks,
// which keeps the per-row work per block at a load, vpmaddwd, a conversion and an fma.
//
// Kernels: the scalar reference, AVX2 (vpmaddwd, 16 products per instruction) and AVX-512 (32), each
// over 1..kActs16Rows activation rows per weight row (the weight block widened once for all rows),
// chosen at run time like the other quantized kernels (quant_dot.h). They agree with the reference
// to float summation order.
//
// Prefill on AVX-512 VNNI CPUs (kQ8TiledMinRows activation rows or more) goes through the tiled
// GEMM of q8_0_tiled.h instead of these row dots: same activations, same integer sums.
#pragma once

#include <cstdint>

#include "kernels/common/gemm_group.h"
#include "kernels/cpu/quant/quant_dot.h"

namespace cypris {

class ThreadPool;

namespace quant {

// Values per activation scale: 8 Q8_0 blocks (the last group of a row may be shorter).
constexpr int kActs16Group = 256;
// Scales in a row of k activations.
inline int64_t acts16_groups(int64_t k) { return (k + kActs16Group - 1) / kActs16Group; }

// A row of k activations: x[i] ~= d[i / 256] * qs[i], d = max|x| / 32767 over the group, qs =
// round-half-even(x / d).
struct ActRow16 {
  const int16_t* qs;
  const float* d;
};

// qs: [k], d: [acts16_groups(k)]; k a multiple of 32.
void quantize_acts16(const float* x, int64_t k, int16_t* qs, float* d);
// The same bytes, 8 values per AVX2 instruction (the scalar quantizer was a third of a prefill-sized
// Q8_0 product) for any isa but Scalar on a CPU with AVX2; otherwise quantize_acts16.
using Quantize16Fn = void (*)(const float* x, int64_t k, int16_t* qs, float* d);
Quantize16Fn quantize_acts16_fn(Isa isa);

// One Q8_0 weight row of k elements (k / 32 blocks) dotted with one activation row: per group of 8
// blocks d_x * sum_b d_w[b] * (integer sum of block b), in order.
float dot_q8_0_acts16_ref(const void* w_row, const ActRow16& a, int64_t k);

// Activation rows a kernel call takes at most: 8 (twice kMaxDotRows) gives the fma units eight
// independent sums to interleave and spreads the widening of each weight block over more rows.
constexpr int kActs16Rows = 8;

// out[r] = w_row . a[r] for nrows (1..kActs16Rows) rows; null when the ISA is not available.
using Dot16Fn = void (*)(const void* w_row, const ActRow16* a, int nrows, int64_t k, float* out);
Dot16Fn dot_q8_0_acts16_fn(Isa isa);

}  // namespace quant

// y = x · Wᵀ (+ bias) for Q8_0 weights w [n, k] with the activations quantized to 16 bits; shapes
// as quant_gemm_xwt (the caller checks them). isa must be available.
void q8_0_gemm_acts16(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, const float* bias,
                      float* y, int64_t ldy, ThreadPool* pool, quant::Isa isa);

// For each group: y[first, first + rows) = x[first, first + rows) · wᵀ (kernels/common/gemm_group.h),
// groups already filtered to those with rows; m covers every group's rows.
void q8_0_gemm_acts16_grouped(const float* x, int64_t m, int64_t k, int64_t ldx, const GemmGroup* groups,
                              int64_t num_groups, int64_t n, float* y, int64_t ldy, ThreadPool* pool);

}  // namespace cypris
