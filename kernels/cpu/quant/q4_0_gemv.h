// The Q4_0 decode GEMV: Q4_0 weights against one to three 8-bit activation rows (quant_ref.h, one
// fp32 scale per 32 values), four weight rows at a time, on AVX-512 VNNI.
//
// The row-dot kernels (quant_dot.h) take one weight row per call and spend most of a decode step
// on per-block scalar work: two fp16 scale conversions, building the scale vector, and the -8
// offset from the activation's block sums in scalar float. Here one activation block pair is
// loaded once and dotted with four weight rows: the -8 of every weight is folded into the integer
// sum (vpdpbusd starts from -8 x the activation's 4-byte sums, computed once per pair for all four
// rows), the eight fp16 weight scales of the four rows become fp32 in one conversion and are
// multiplied by the activation scales together, and each row's lanes pick their scale with one
// permute. Four independent accumulators also hide the fma latency a single row's chain exposes.
// The weights stay in GGUF's Q4_0 layout (no repacking); the sums per block are the scalar
// reference's (dot_ref) integers, added in another float order.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant/quant_dot.h"

namespace cypris::quant {

// Activation rows up to which quant_gemm_xwt takes the GEMV for Q4_0 (from kQ4TiledMinRows on, the
// tiled GEMM).
constexpr int64_t kQ4GemvMaxRows = 3;

// True when the GEMV can run with that ISA (Avx512 with VNNI only).
bool q4_0_gemv_available(Isa isa);

// y[r * ldy + j] = rows[r] . w_j (+ bias[j]) for the num_rows (1..kQ4GemvMaxRows) activation rows
// (quantized in blocks of 32) and the Q4_0 weight rows j in [j0, j1) of w (rows of k / 32 blocks).
// isa must be available.
void q4_0_gemv(const ActRow* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
               const float* bias, float* y, int64_t ldy, Isa isa);

}  // namespace cypris::quant
