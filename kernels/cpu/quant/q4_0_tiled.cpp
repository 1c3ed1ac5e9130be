// The Q4_0 prefill GEMM (see q4_0_tiled.h): panel packing (scalar, and AVX-512 with in-register
// 8 x 8 transposes) and the tile kernels (scalar, AVX-512 VNNI).
#include "kernels/cpu/quant/q4_0_tiled.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/common/dtype.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/immintrin_quiet.h"

namespace cypris::quant {
namespace {

constexpr int kPanel = static_cast<int>(kQ4TilePanel);
constexpr int kQuads = kQK / 4;              // column quads per block
constexpr int kLine = kPanel * 4;            // bytes per quad line: 32 rows x 4
constexpr int kBlockBytes = kQuads * kLine;  // bytes per packed block
constexpr int kTileRows = 4;                 // activation rows per micro-tile

// The packed panel: wp[b][q][row][4] (nibble values 0..15), dw[b][row] (fp32). Rows past the
// panel's end are zero (their outputs are not written).
struct Panel {
  std::vector<uint8_t> wp;
  std::vector<float> dw;
};

const BlockQ4_0* block_row(const void* w, size_t row_bytes, int64_t j) {
  return reinterpret_cast<const BlockQ4_0*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(j) * row_bytes);
}

int nibble(const BlockQ4_0& b, int e) {
  return e < 16 ? b.qs[e] & 0xF : b.qs[e - 16] >> 4;
}

// -8 x the sum of the activation block's 32 values.
int32_t offset_of(const ActRow& a, int64_t b) {
  return -8 * (a.bsum[2 * b] + a.bsum[2 * b + 1]);
}

void pack_scalar(const void* w, size_t row_bytes, int64_t j, int nc, int64_t nb, Panel& p) {
  std::fill(p.wp.begin(), p.wp.end(), uint8_t{0});
  std::fill(p.dw.begin(), p.dw.end(), 0.0f);
  for (int c = 0; c < nc; ++c) {
    const BlockQ4_0* blk = block_row(w, row_bytes, j + c);
    for (int64_t b = 0; b < nb; ++b) {
      p.dw[b * kPanel + c] = f16_to_f32(blk[b].d);
      uint8_t* lines = p.wp.data() + b * kBlockBytes + c * 4;
      for (int e = 0; e < kQK; ++e) lines[(e / 4) * kLine + e % 4] = static_cast<uint8_t>(nibble(blk[b], e));
    }
  }
}

// out[r][c] for r < mr, c < 32: per block d_x * (d_w * integer sum), blocks added in order.
void tile_scalar(const ActRow* rows, int mr, int64_t nb, const Panel& p, float* out) {
  for (int r = 0; r < mr; ++r) {
    for (int c = 0; c < kPanel; ++c) {
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* lines = p.wp.data() + b * kBlockBytes + c * 4;
        const int8_t* x = rows[r].qs + b * kQK;
        int32_t isum = offset_of(rows[r], b);
        for (int e = 0; e < kQK; ++e) isum += lines[(e / 4) * kLine + e % 4] * x[e];
        sum += rows[r].d[b] * (p.dw[b * kPanel + c] * static_cast<float>(isum));
      }
      out[r * kPanel + c] = sum;
    }
  }
}

#if defined(__x86_64__)
#define CYPRIS_TILED_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

// 8 x 8 transpose of 32-bit elements: in[c] element q -> out[q] element c.
CYPRIS_TILED_AVX512 void transpose8(const __m256i* in, __m256i* out) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  // Within each 128-bit lane L, u[4i + q] holds element 4L + q of rows 4i .. 4i + 3.
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int q = 0; q < 4; ++q) {
    out[q] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x20);
    out[4 + q] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x31);
  }
}

// As pack_scalar: each row's block unpacked to 32 nibble bytes in order (8 quads), 8 rows at a
// time transposed into 8 quad lines.
CYPRIS_TILED_AVX512 void pack_avx512(const void* w, size_t row_bytes, int64_t j, int nc, int64_t nb, Panel& p) {
  const BlockQ4_0* blk[kPanel];
  for (int c = 0; c < kPanel; ++c) blk[c] = c < nc ? block_row(w, row_bytes, j + c) : nullptr;
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* lines = p.wp.data() + b * kBlockBytes;
    for (int h = 0; h < kPanel / 8; ++h) {
      __m256i in[8], out[8];
      for (int c = 0; c < 8; ++c) {
        const BlockQ4_0* bc = blk[8 * h + c];
        if (bc) {
          const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bc[b].qs));
          in[c] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
        } else {
          in[c] = _mm256_setzero_si256();
        }
      }
      transpose8(in, out);
      for (int q = 0; q < kQuads; ++q) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lines + q * kLine + 32 * h), out[q]);
      }
    }
    for (int c = 0; c < kPanel; ++c) p.dw[b * kPanel + c] = blk[c] ? _cvtsh_ss(blk[c][b].d) : 0.0f;
  }
}

template <int MR>
CYPRIS_TILED_AVX512 void tile_avx512(const ActRow* rows, int64_t nb, const Panel& p, float* out) {
  const int8_t* xq[MR];
  for (int r = 0; r < MR; ++r) xq[r] = rows[r].qs;
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const uint8_t* wp = p.wp.data();
  const float* dw = p.dw.data();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i isum[MR][2];
    for (int r = 0; r < MR; ++r) isum[r][0] = isum[r][1] = _mm512_set1_epi32(offset_of(rows[r], b));
    const uint8_t* lines = wp + b * kBlockBytes;
    for (int q = 0; q < kQuads; ++q) {
      const __m512i w0 = _mm512_loadu_si512(lines + q * kLine);
      const __m512i w1 = _mm512_loadu_si512(lines + q * kLine + 64);
      for (int r = 0; r < MR; ++r) {
        int32_t quad;
        std::memcpy(&quad, xq[r] + b * kQK + 4 * q, sizeof(quad));
        const __m512i x = _mm512_set1_epi32(quad);
        isum[r][0] = _mm512_dpbusd_epi32(isum[r][0], w0, x);
        isum[r][1] = _mm512_dpbusd_epi32(isum[r][1], w1, x);
      }
    }
    const __m512 d0 = _mm512_loadu_ps(dw + b * kPanel);
    const __m512 d1 = _mm512_loadu_ps(dw + b * kPanel + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 dx = _mm512_set1_ps(rows[r].d[b]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][0]), _mm512_mul_ps(d0, dx), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][1]), _mm512_mul_ps(d1, dx), acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(out + r * kPanel, acc[r][0]);
    _mm512_storeu_ps(out + r * kPanel + 16, acc[r][1]);
  }
}

void tile_avx512_n(const ActRow* rows, int mr, int64_t nb, const Panel& p, float* out) {
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

bool q4_0_tiled_available(Isa isa) {
  if (!isa_available(isa)) return false;
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return true;
#endif
  return isa == Isa::Scalar;
}

void q4_0_tiled_gemm(const ActRow* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
                     const float* bias, float* y, int64_t ldy, Isa isa) {
  const int64_t nb = k / kQK;
  const size_t row_bytes = dtype_nbytes(DType::Q4_0, k);
  thread_local Panel panel;
  panel.wp.resize(static_cast<size_t>(nb * kBlockBytes));
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
