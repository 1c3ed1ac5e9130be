// The Q6_K prefill GEMM: Q6_K weights against the 8-bit activations the Q6_K row dot uses
// (quant_ref.h: one fp32 scale per 256 values, group sums per 16) for many activation rows at once,
// as a tiled int8 GEMM instead of one dot per (weight row, activation row) pair.
//
// The weights stay in memory as GGUF Q6_K rows (decode reads them as they are). A panel of 32
// weight rows is unpacked once per call to unsigned 6-bit values (0..63, the stored value before
// its -32) laid out by quads: for each super-block and each group of 4 columns of it, two 64-byte
// lines hold the 32 rows' 4 bytes; beside them each row's 16 sub-block scales as int32 and its fp16
// d as fp32. The AVX-512 VNNI micro-kernel takes 4 activation rows x 32 weight rows: per sub-block
// of 16 columns, 4 quads x (two weight lines, four broadcast activation quads) feed eight vpdpbusd
// each into int32 sums that start at -32 x the activation group's sum (the -32 of every weight),
// which one vpmulld by the rows' sub-block scales adds into the super-block's integer sum; then one
// conversion and one fma by d_w x d_x per super-block. The integer sums are exactly the scalar
// reference's (dot_ref); only the float rounding order differs.
//
// Below kQ6TiledMinRows activation rows the row-dot kernels are faster; AVX2 and scalar CPUs use
// them at every size.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant/quant_dot.h"

namespace cypris::quant {

// Activation rows at and above which quant_gemm_xwt takes the tiled kernel for Q6_K on AVX-512.
constexpr int64_t kQ6TiledMinRows = 4;
// Weight rows per panel.
constexpr int64_t kQ6TilePanel = 32;

// True when the tiled kernel can run with that ISA (Scalar: the plain C++ version of the same
// packing and tile loop, for the tests; Avx512: VNNI; Avx2: none).
bool q6_k_tiled_available(Isa isa);

// y[r * ldy + j] = rows[r] . w_j (+ bias[j]) for the num_rows activation rows (quantized in blocks
// of 256) and the Q6_K weight rows j in [j0, j1) of w (rows of k / 256 super-blocks). isa must be
// available.
void q6_k_tiled_gemm(const ActRow* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
                     const float* bias, float* y, int64_t ldy, Isa isa);

}  // namespace cypris::quant
