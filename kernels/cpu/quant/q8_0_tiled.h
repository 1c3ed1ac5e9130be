// The Q8_0 prefill GEMM: Q8_0 weights against 16-bit activations (q8_0_acts16.h) for many
// activation rows at once, as a tiled integer GEMM instead of one dot per (weight row, activation
// row) pair.
//
// The weights stay in memory as GGUF Q8_0 rows (decode reads them as they are). A panel of 32
// weight rows is widened to int16 once per call and laid out pair-interleaved: for each block and
// each pair of columns (2p, 2p + 1) of it, two 64-byte lines hold the 32 rows' two values. The
// AVX-512 VNNI micro-kernel then takes 4 activation rows x 32 weight rows: per pair, two weight
// lines and four broadcast activation pairs feed eight vpdpwssd (each 16 rows x 2 products summed
// in int32), so every instruction does 32 multiply-adds and nothing is reduced across lanes. Per
// weight block the int32 sums are converted and scaled by the 32 rows' d_w (one vector fma per
// accumulator), per group of 8 blocks by each activation row's d_x: the scalar reference's
// arithmetic (dot_q8_0_acts16_ref) in another float summation order. The integer sums are exact
// (32 products of |w| <= 128 and |x| <= 32767 per block stay below 2^31).
//
// Below kQ8TiledMinRows activation rows the row-dot kernels of q8_0_acts16 are faster (the panel
// widening is not paid back); AVX2 and scalar CPUs use those kernels at every size.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant/q8_0_acts16.h"

namespace cypris::quant {

// Activation rows at and above which q8_0_gemm_acts16 takes the tiled kernel on AVX-512 CPUs.
constexpr int64_t kQ8TiledMinRows = 8;
// Weight rows per panel.
constexpr int64_t kQ8TilePanel = 32;

// True when the tiled kernel can run with that ISA (Scalar: the plain C++ version of the same
// packing and tile loop, for the tests; Avx512: VNNI; Avx2: none).
bool q8_0_tiled_available(Isa isa);

// y[r * ldy + j] = rows[r] . w_j (+ bias[j]) for the num_rows activation rows and the Q8_0 weight
// rows j in [j0, j1) of w (rows of k / 32 blocks, k a multiple of 32). isa must be available.
void q8_0_tiled_gemm(const ActRow16* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
                     const float* bias, float* y, int64_t ldy, Isa isa);

}  // namespace cypris::quant
