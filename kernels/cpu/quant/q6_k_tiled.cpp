// The Q6_K prefill GEMM (see q6_k_tiled.h): panel packing (scalar, and AVX-512 with the row dot's
// in-register 6-bit decode and 8 x 8 transposes) and the tile kernels (scalar, AVX-512 VNNI).
#include "kernels/cpu/quant/q6_k_tiled.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/common/dtype.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/immintrin_quiet.h"

namespace cypris::quant {
namespace {

constexpr int kPanel = static_cast<int>(kQ6TilePanel);
constexpr int kGroups = kQKK / 16;           // sub-blocks (one scale each) per super-block
constexpr int kQuads = kQKK / 4;             // column quads per super-block
constexpr int kLine = kPanel * 4;            // bytes per quad line: 32 rows x 4
constexpr int kBlockBytes = kQuads * kLine;  // bytes per packed super-block
constexpr int kTileRows = 4;                 // activation rows per micro-tile

// The packed panel: wp[b][q][row][4] (values 0..63), sc[b][g][row] (int32), dw[b][row] (fp32).
// Rows past the panel's end are zero (their outputs are not written).
struct Panel {
  std::vector<uint8_t> wp;
  std::vector<int32_t> sc;
  std::vector<float> dw;
};

const BlockQ6_K* block_row(const void* w, size_t row_bytes, int64_t j) {
  return reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(j) * row_bytes);
}

// The stored 6-bit value of element e (0..63), as quant_ref's unpack_block reads it.
int value6(const BlockQ6_K& b, int e) {
  const int h = e / 128, p = (e % 128) / 32, l = e % 32;
  const uint8_t lo = b.ql[64 * h + 32 * (p & 1) + l];
  const int low4 = p < 2 ? lo & 0xF : lo >> 4;
  const int high2 = (b.qh[32 * h + l] >> (2 * p)) & 3;
  return low4 | (high2 << 4);
}

// -32 x the sum of the activation group's 16 values.
int32_t offset_of(const ActRow& a, int64_t b, int g) { return -32 * a.bsum[b * kGroups + g]; }

void pack_scales(const BlockQ6_K* const* blk, int64_t b, Panel& p) {
  for (int c = 0; c < kPanel; ++c) {
    for (int g = 0; g < kGroups; ++g) p.sc[(b * kGroups + g) * kPanel + c] = blk[c] ? blk[c][b].scales[g] : 0;
    p.dw[b * kPanel + c] = blk[c] ? f16_to_f32(blk[c][b].d) : 0.0f;
  }
}

void pack_scalar(const void* w, size_t row_bytes, int64_t j, int nc, int64_t nb, Panel& p) {
  std::fill(p.wp.begin(), p.wp.end(), uint8_t{0});
  const BlockQ6_K* blk[kPanel];
  for (int c = 0; c < kPanel; ++c) blk[c] = c < nc ? block_row(w, row_bytes, j + c) : nullptr;
  for (int64_t b = 0; b < nb; ++b) {
    pack_scales(blk, b, p);
    for (int c = 0; c < nc; ++c) {
      uint8_t* lines = p.wp.data() + b * kBlockBytes + c * 4;
      for (int e = 0; e < kQKK; ++e) lines[(e / 4) * kLine + e % 4] = static_cast<uint8_t>(value6(blk[c][b], e));
    }
  }
}

// out[r][c] for r < mr, c < 32: per super-block d_x * (d_w * integer sum), super-blocks added in order.
void tile_scalar(const ActRow* rows, int mr, int64_t nb, const Panel& p, float* out) {
  for (int r = 0; r < mr; ++r) {
    for (int c = 0; c < kPanel; ++c) {
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* lines = p.wp.data() + b * kBlockBytes + c * 4;
        const int8_t* x = rows[r].qs + b * kQKK;
        int32_t isum = 0;
        for (int g = 0; g < kGroups; ++g) {
          int32_t gsum = offset_of(rows[r], b, g);
          for (int e = 16 * g; e < 16 * g + 16; ++e) gsum += lines[(e / 4) * kLine + e % 4] * x[e];
          isum += p.sc[(b * kGroups + g) * kPanel + c] * gsum;
        }
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

// One super-block's 256 values (0..63) in element order, as the AVX-512 row dot decodes them.
CYPRIS_TILED_AVX512 void decode_avx512(const BlockQ6_K& blk, uint8_t* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i shl_01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr_23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
    const __m256i qh256 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
    const __m512i qh = _mm512_inserti64x4(_mm512_zextsi256_si512(qh256), qh256, 1);
    _mm512_storeu_si512(out + 128 * h,
                        _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl_01), m30)));
    _mm512_storeu_si512(out + 128 * h + 64, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                            _mm512_and_si512(_mm512_srlv_epi16(qh, shr_23), m30)));
  }
}

// As pack_scalar: 8 rows at a time decoded to 256 bytes each, then 8 quads of them transposed into
// 8 quad lines.
CYPRIS_TILED_AVX512 void pack_avx512(const void* w, size_t row_bytes, int64_t j, int nc, int64_t nb, Panel& p) {
  const BlockQ6_K* blk[kPanel];
  for (int c = 0; c < kPanel; ++c) blk[c] = c < nc ? block_row(w, row_bytes, j + c) : nullptr;
  alignas(64) uint8_t dec[8][kQKK];
  for (int64_t b = 0; b < nb; ++b) {
    pack_scales(blk, b, p);
    uint8_t* lines = p.wp.data() + b * kBlockBytes;
    for (int h = 0; h < kPanel / 8; ++h) {
      for (int c = 0; c < 8; ++c) {
        const BlockQ6_K* bc = blk[8 * h + c];
        if (bc) {
          decode_avx512(bc[b], dec[c]);
        } else {
          std::memset(dec[c], 0, kQKK);
        }
      }
      for (int q0 = 0; q0 < kQuads; q0 += 8) {
        __m256i in[8], out[8];
        for (int c = 0; c < 8; ++c) in[c] = _mm256_load_si256(reinterpret_cast<const __m256i*>(dec[c] + 4 * q0));
        transpose8(in, out);
        for (int q = 0; q < 8; ++q) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(lines + (q0 + q) * kLine + 32 * h), out[q]);
        }
      }
    }
  }
}

template <int MR>
CYPRIS_TILED_AVX512 void tile_avx512(const ActRow* rows, int64_t nb, const Panel& p, float* out) {
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i bsum[MR][2];
    for (int r = 0; r < MR; ++r) bsum[r][0] = bsum[r][1] = _mm512_setzero_si512();
    const uint8_t* lines = p.wp.data() + b * kBlockBytes;
    const int32_t* sc = p.sc.data() + b * kGroups * kPanel;
    for (int g = 0; g < kGroups; ++g) {
      __m512i isum[MR][2];
      for (int r = 0; r < MR; ++r) isum[r][0] = isum[r][1] = _mm512_set1_epi32(offset_of(rows[r], b, g));
      for (int q = 4 * g; q < 4 * g + 4; ++q) {
        const __m512i w0 = _mm512_loadu_si512(lines + q * kLine);
        const __m512i w1 = _mm512_loadu_si512(lines + q * kLine + 64);
        for (int r = 0; r < MR; ++r) {
          int32_t quad;
          std::memcpy(&quad, rows[r].qs + b * kQKK + 4 * q, sizeof(quad));
          const __m512i x = _mm512_set1_epi32(quad);
          isum[r][0] = _mm512_dpbusd_epi32(isum[r][0], w0, x);
          isum[r][1] = _mm512_dpbusd_epi32(isum[r][1], w1, x);
        }
      }
      const __m512i s0 = _mm512_loadu_si512(sc + g * kPanel);
      const __m512i s1 = _mm512_loadu_si512(sc + g * kPanel + 16);
      for (int r = 0; r < MR; ++r) {
        bsum[r][0] = _mm512_add_epi32(bsum[r][0], _mm512_mullo_epi32(isum[r][0], s0));
        bsum[r][1] = _mm512_add_epi32(bsum[r][1], _mm512_mullo_epi32(isum[r][1], s1));
      }
    }
    const __m512 d0 = _mm512_loadu_ps(p.dw.data() + b * kPanel);
    const __m512 d1 = _mm512_loadu_ps(p.dw.data() + b * kPanel + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 dx = _mm512_set1_ps(rows[r].d[b]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(bsum[r][0]), _mm512_mul_ps(d0, dx), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(bsum[r][1]), _mm512_mul_ps(d1, dx), acc[r][1]);
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

bool q6_k_tiled_available(Isa isa) {
  if (!isa_available(isa)) return false;
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return true;
#endif
  return isa == Isa::Scalar;
}

void q6_k_tiled_gemm(const ActRow* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
                     const float* bias, float* y, int64_t ldy, Isa isa) {
  const int64_t nb = k / kQKK;
  const size_t row_bytes = dtype_nbytes(DType::Q6_K, k);
  thread_local Panel panel;
  panel.wp.resize(static_cast<size_t>(nb * kBlockBytes));
  panel.sc.resize(static_cast<size_t>(nb * kGroups * kPanel));
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
