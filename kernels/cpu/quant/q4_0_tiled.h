// The Q4_0 prefill GEMM: Q4_0 weights against 8-bit activations (quant_ref.h, one fp32 scale per 32
// values) for many activation rows at once, as a tiled int8 GEMM instead of one dot per (weight
// row, activation row) pair.
//
// The weights stay in memory as GGUF Q4_0 rows (decode reads them as they are). A panel of 32
// weight rows is unpacked once per call to unsigned nibbles (0..15, the stored value before its
// -8) laid out by quads: for each block and each group of 4 columns of it, two 64-byte lines hold
// the 32 rows' 4 bytes. The AVX-512 VNNI micro-kernel takes 4 activation rows x 32 weight rows: per
// quad, two weight lines and four broadcast activation quads feed eight vpdpbusd (unsigned weight
// bytes x signed activation bytes, 4 products summed per int32 lane), 64 multiply-adds each. Per
// block the -8 comes back as -8 x the activation block's sum (from the quantizer's group sums),
// then one conversion and one fma by d_w x d_x: the scalar reference's integer sums (dot_ref) in
// another float rounding order.
//
// Below kQ4TiledMinRows activation rows the row-dot kernels are faster; AVX2 and scalar CPUs use
// them at every size.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant/quant_dot.h"

namespace cypris::quant {

// Activation rows at and above which quant_gemm_xwt takes the tiled kernel for Q4_0 on AVX-512.
constexpr int64_t kQ4TiledMinRows = 4;
// Weight rows per panel.
constexpr int64_t kQ4TilePanel = 32;

// True when the tiled kernel can run with that ISA (Scalar: the plain C++ version of the same
// packing and tile loop, for the tests; Avx512: VNNI; Avx2: none).
bool q4_0_tiled_available(Isa isa);

// y[r * ldy + j] = rows[r] . w_j (+ bias[j]) for the num_rows activation rows (quantized in blocks
// of 32) and the Q4_0 weight rows j in [j0, j1) of w (rows of k / 32 blocks). isa must be available.
void q4_0_tiled_gemm(const ActRow* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
                     const float* bias, float* y, int64_t ldy, Isa isa);

}  // namespace cypris::quant
