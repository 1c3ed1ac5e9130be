// The Q8_0 prefill GEMM (see q8_0_tiled.h): panel packing (scalar, and AVX-512 with an in-register
// 16 x 16 transpose) and the tile kernels (scalar, AVX-512 VNNI).
#include "kernels/cpu/quant/q8_0_tiled.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/common/dtype.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/immintrin_quiet.h"

namespace cypris::quant {
namespace {

constexpr int kPanel = static_cast<int>(kQ8TilePanel);
constexpr int kPairs = kQK / 2;              // column pairs per block
constexpr int kLine = kPanel * 2;            // int16 values per pair line: 32 rows x 2
constexpr int kBlockLines = kPairs * kLine;  // int16 values per packed block
constexpr int kGroupBlocks = kActs16Group / kQK;
constexpr int kTileRows = 4;  // activation rows per micro-tile

// The packed panel: wp[b][p][row][2] (int16), dw[b][row] (fp32). Rows past the panel's end are zero.
struct Panel {
  std::vector<int16_t> wp;
  std::vector<float> dw;
};

const BlockQ8_0* block_row(const void* w, size_t row_bytes, int64_t j) {
  return reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(j) * row_bytes);
}

void pack_scalar(const void* w, size_t row_bytes, int64_t j, int nc, int64_t nb, Panel& p) {
  std::fill(p.wp.begin(), p.wp.end(), int16_t{0});
  std::fill(p.dw.begin(), p.dw.end(), 0.0f);
  for (int c = 0; c < nc; ++c) {
    const BlockQ8_0* blk = block_row(w, row_bytes, j + c);
    for (int64_t b = 0; b < nb; ++b) {
      p.dw[b * kPanel + c] = f16_to_f32(blk[b].d);
      int16_t* line = p.wp.data() + b * kBlockLines + c * 2;
      for (int q = 0; q < kPairs; ++q) {
        line[q * kLine] = blk[b].qs[2 * q];
        line[q * kLine + 1] = blk[b].qs[2 * q + 1];
      }
    }
  }
}

// out[r][c] for r < mr, c < 32: the reference's arithmetic on the packed panel.
void tile_scalar(const ActRow16* rows, int mr, int64_t nb, const Panel& p, float* out) {
  for (int r = 0; r < mr; ++r) {
    for (int c = 0; c < kPanel; ++c) {
      float sum = 0.0f;
      for (int64_t g0 = 0; g0 < nb; g0 += kGroupBlocks) {
        float gsum = 0.0f;
        for (int64_t b = g0; b < std::min<int64_t>(g0 + kGroupBlocks, nb); ++b) {
          const int16_t* line = p.wp.data() + b * kBlockLines + c * 2;
          const int16_t* x = rows[r].qs + b * kQK;
          int32_t isum = 0;
          for (int q = 0; q < kPairs; ++q) isum += line[q * kLine] * x[2 * q] + line[q * kLine + 1] * x[2 * q + 1];
          gsum += p.dw[b * kPanel + c] * static_cast<float>(isum);
        }
        sum += rows[r].d[g0 / kGroupBlocks] * gsum;
      }
      out[r * kPanel + c] = sum;
    }
  }
}

#if defined(__x86_64__)
#define CYPRIS_TILED_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

// 16 x 16 transpose of 32-bit elements: in[c] element q -> out[q] element c.
CYPRIS_TILED_AVX512 void transpose16(const __m512i* in, __m512i* out) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  // Within each 128-bit lane L, u[4i + q] holds element 4L + q of rows 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int q = 0; q < 4; ++q) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xEE);
    out[q] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    out[4 + q] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    out[8 + q] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    out[12 + q] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// As pack_scalar: each row's block widened to 16 int32 pairs, 16 rows transposed into 16 pair lines.
CYPRIS_TILED_AVX512 void pack_avx512(const void* w, size_t row_bytes, int64_t j, int nc, int64_t nb, Panel& p) {
  const BlockQ8_0* blk[kPanel];
  for (int c = 0; c < kPanel; ++c) blk[c] = c < nc ? block_row(w, row_bytes, j + c) : nullptr;
  for (int64_t b = 0; b < nb; ++b) {
    int16_t* lines = p.wp.data() + b * kBlockLines;
    for (int h = 0; h < 2; ++h) {
      __m512i in[16], out[16];
      for (int c = 0; c < 16; ++c) {
        const BlockQ8_0* bc = blk[16 * h + c];
        in[c] = bc ? _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bc[b].qs)))
                   : _mm512_setzero_si512();
      }
      transpose16(in, out);
      for (int q = 0; q < kPairs; ++q) _mm512_storeu_si512(lines + q * kLine + 32 * h, out[q]);
    }
    for (int c = 0; c < kPanel; ++c) p.dw[b * kPanel + c] = blk[c] ? _cvtsh_ss(blk[c][b].d) : 0.0f;
  }
}

template <int MR>
CYPRIS_TILED_AVX512 void tile_avx512(const ActRow16* rows, int64_t nb, const Panel& p, float* out) {
  const int16_t* xq[MR];
  for (int r = 0; r < MR; ++r) xq[r] = rows[r].qs;
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int16_t* wp = p.wp.data();
  const float* dw = p.dw.data();
  for (int64_t g0 = 0; g0 < nb; g0 += kGroupBlocks) {
    const int64_t g1 = std::min<int64_t>(g0 + kGroupBlocks, nb);
    __m512 gacc[MR][2];
    for (int r = 0; r < MR; ++r) gacc[r][0] = gacc[r][1] = _mm512_setzero_ps();
    for (int64_t b = g0; b < g1; ++b) {
      __m512i isum[MR][2];
      for (int r = 0; r < MR; ++r) isum[r][0] = isum[r][1] = _mm512_setzero_si512();
      const int16_t* lines = wp + b * kBlockLines;
      // Unrolled: a rolled loop over the register array costs GCC a register copy per vpdpwssd.
#pragma GCC unroll 16
      for (int q = 0; q < kPairs; ++q) {
        const __m512i w0 = _mm512_loadu_si512(lines + q * kLine);
        const __m512i w1 = _mm512_loadu_si512(lines + q * kLine + 32);
        for (int r = 0; r < MR; ++r) {
          int32_t pair;
          std::memcpy(&pair, xq[r] + b * kQK + 2 * q, sizeof(pair));
          const __m512i x = _mm512_set1_epi32(pair);
          isum[r][0] = _mm512_dpwssd_epi32(isum[r][0], w0, x);
          isum[r][1] = _mm512_dpwssd_epi32(isum[r][1], w1, x);
        }
      }
      const __m512 d0 = _mm512_loadu_ps(dw + b * kPanel);
      const __m512 d1 = _mm512_loadu_ps(dw + b * kPanel + 16);
      for (int r = 0; r < MR; ++r) {
        gacc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][0]), d0, gacc[r][0]);
        gacc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][1]), d1, gacc[r][1]);
      }
    }
    for (int r = 0; r < MR; ++r) {
      const __m512 dx = _mm512_set1_ps(rows[r].d[g0 / kGroupBlocks]);
      acc[r][0] = _mm512_fmadd_ps(gacc[r][0], dx, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(gacc[r][1], dx, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(out + r * kPanel, acc[r][0]);
    _mm512_storeu_ps(out + r * kPanel + 16, acc[r][1]);
  }
}

void tile_avx512_n(const ActRow16* rows, int mr, int64_t nb, const Panel& p, float* out) {
  switch (mr) {
    case 1:
      return tile_avx512<1>(rows, nb, p, out);
    case 2:
      return tile_avx512<2>(rows, nb, p, out);
    case 3:
      return tile_avx512<3>(rows, nb, p, out);
    default:
      return tile_avx512<4>(rows, nb, p, out);
  }
}
static_assert(kTileRows == 4);
#endif

}  // namespace

bool q8_0_tiled_available(Isa isa) {
  if (!isa_available(isa)) return false;
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return true;
#endif
  return isa == Isa::Scalar;
}

void q8_0_tiled_gemm(const ActRow16* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
                     const float* bias, float* y, int64_t ldy, Isa isa) {
  const int64_t nb = k / kQK;
  const size_t row_bytes = dtype_nbytes(DType::Q8_0, k);
  thread_local Panel panel;
  panel.wp.resize(static_cast<size_t>(nb * kBlockLines));
  panel.dw.resize(static_cast<size_t>(nb * kPanel));
  [[maybe_unused]] const bool simd = isa == Isa::Avx512;
  float out[kTileRows * kPanel];
  for (int64_t j = j0; j < j1; j += kPanel) {
    const int nc = static_cast<int>(std::min<int64_t>(kPanel, j1 - j));
#if defined(__x86_64__)
    if (simd) {
      pack_avx512(w, row_bytes, j, nc, nb, panel);
    } else {
      pack_scalar(w, row_bytes, j, nc, nb, panel);
    }
#else
    pack_scalar(w, row_bytes, j, nc, nb, panel);
#endif
    for (int64_t i = 0; i < num_rows; i += kTileRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kTileRows, num_rows - i));
#if defined(__x86_64__)
      if (simd) {
        tile_avx512_n(rows + i, mr, nb, panel, out);
      } else {
        tile_scalar(rows + i, mr, nb, panel, out);
      }
#else
      tile_scalar(rows + i, mr, nb, panel, out);
#endif
      for (int r = 0; r < mr; ++r) {
        float* yr = y + (i + r) * ldy + j;
        for (int c = 0; c < nc; ++c) yr[c] = out[r * kPanel + c] + (bias ? bias[j + c] : 0.0f);
      }
    }
  }
}

}  // namespace cypris::quant
