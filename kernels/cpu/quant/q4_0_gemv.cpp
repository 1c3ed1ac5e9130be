// The Q4_0 decode GEMV (see q4_0_gemv.h).
#include "kernels/cpu/quant/q4_0_gemv.h"

#include <cstring>

#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/immintrin_quiet.h"
#include "kernels/cpu/quant/tile_dot_rows.h"

namespace cypris::quant {

#if defined(__x86_64__)
namespace {

#define CYPRIS_GEMV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

constexpr int kBlockBytes = static_cast<int>(sizeof(BlockQ4_0));  // 18: fp16 scale, 16 bytes of nibbles

uint32_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The four horizontal sums of a, b, c, d.
CYPRIS_GEMV_AVX512 inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// One block of one row (the odd last block of a row): d_w * d_x * (sum q * x - 8 * sum x).
CYPRIS_GEMV_AVX512 float block_dot(const uint8_t* blk, const ActRow& a, int64_t b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
  const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + b * kQK));
  const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x);
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  const int32_t isum = _mm_cvtsi128_si32(s4) - 8 * (a.bsum[2 * b] + a.bsum[2 * b + 1]);
  return _cvtsh_ss(static_cast<uint16_t>(load_u16(blk))) * a.d[b] * static_cast<float>(isum);
}

// out[c] = a . w_c for the NW (1..4) weight rows starting at w0, row_bytes apart, of nb blocks.
//
// Per pair of blocks (64 values): the 32 nibble bytes of a row go into one register as
// [block 0 low nibbles | block 1 low | block 0 high | block 1 high] (16 bytes each), so the
// activation pair is permuted once to the same order (128-bit lanes 0, 2, 1, 3) and int32 lanes
// 0-3 and 8-11 belong to block 0, lanes 4-7 and 12-15 to block 1.
template <int NW>
CYPRIS_GEMV_AVX512 void gemv_rows(const ActRow& a, int64_t nb, const uint8_t* w0, size_t row_bytes, float* out) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi8(8);
  const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);  // high half: >> 4
  // Lanes of weight row c's scales among the 8 converted ones (c's block 0 at 2c, block 1 at 2c + 1).
  const __m512i pick = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
  __m512i idx[NW];
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int c = 0; c < NW; ++c) idx[c] = _mm512_add_epi32(pick, _mm512_set1_epi32(2 * c));
  // The same bytes of the rows of a later group of four, at least kWeightPrefetchBytes ahead (the
  // four rows of a group are read side by side, so ahead within a row would be rows already read).
  const size_t group_bytes = 4 * row_bytes;
  const size_t ahead = (kWeightPrefetchBytes + group_bytes - 1) / group_bytes * group_bytes;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i x = _mm512_loadu_si512(a.qs + b * kQK);
    const __m512i xp = _mm512_shuffle_i64x2(x, x, _MM_SHUFFLE(3, 1, 2, 0));
    // -8 x the activation's 4-byte sums: the start of every row's integer sum.
    const __m512i base =
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, xp));
    // The rows' scales [c0 b0, c0 b1, c1 b0, ...] times the activation scales [b0, b1, b0, b1, ...].
    uint32_t sh[4] = {0, 0, 0, 0};
    for (int c = 0; c < NW; ++c) {
      const uint8_t* p = w0 + c * row_bytes + b * kBlockBytes;
      sh[c] = load_u16(p) | (load_u16(p + kBlockBytes) << 16);
    }
    const __m256 wd = _mm256_cvtph_ps(_mm_setr_epi32(static_cast<int>(sh[0]), static_cast<int>(sh[1]),
                                                     static_cast<int>(sh[2]), static_cast<int>(sh[3])));
    double d2;
    std::memcpy(&d2, a.d + b, sizeof d2);
    const __m512 scales = _mm512_zextps256_ps512(_mm256_mul_ps(wd, _mm256_castpd_ps(_mm256_set1_pd(d2))));
    for (int c = 0; c < NW; ++c) {
      const uint8_t* p = w0 + c * row_bytes + b * kBlockBytes;
      prefetch_lines(p, ahead, 2 * kBlockBytes);
      const __m256i v = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBlockBytes + 2)), 1);
      const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(v), shift), low);
      const __m512i s = _mm512_dpbusd_epi32(base, q, xp);
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(idx[c], scales), acc[c]);
    }
  }
  alignas(16) float sums[4];
  _mm_store_ps(sums, reduce4(acc[0], acc[1], acc[2], acc[3]));
  for (int c = 0; c < NW; ++c) {
    out[c] = sums[c];
    if (b < nb) out[c] += block_dot(w0 + c * row_bytes + b * kBlockBytes, a, b);
  }
}

}  // namespace
#endif

bool q4_0_gemv_available(Isa isa) {
#if defined(__x86_64__)
  return isa == Isa::Avx512 && isa_available(Isa::Avx512);
#else
  (void)isa;
  return false;
#endif
}

void q4_0_gemv(const ActRow* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0, int64_t j1,
               const float* bias, float* y, int64_t ldy, Isa isa) {
#if defined(__x86_64__)
  if (!q4_0_gemv_available(isa)) return;
  const int64_t nb = k / kQK;
  const size_t row_bytes = static_cast<size_t>(nb) * kBlockBytes;
  const auto* wb = static_cast<const uint8_t*>(w);
  float out[4];
  for (int64_t j = j0; j < j1; j += 4) {
    const int nw = static_cast<int>(j1 - j < 4 ? j1 - j : 4);
    const uint8_t* wj = wb + static_cast<size_t>(j) * row_bytes;
    for (int64_t r = 0; r < num_rows; ++r) {
      switch (nw) {
        case 4: gemv_rows<4>(rows[r], nb, wj, row_bytes, out); break;
        case 3: gemv_rows<3>(rows[r], nb, wj, row_bytes, out); break;
        case 2: gemv_rows<2>(rows[r], nb, wj, row_bytes, out); break;
        default: gemv_rows<1>(rows[r], nb, wj, row_bytes, out); break;
      }
      for (int c = 0; c < nw; ++c) y[r * ldy + j + c] = out[c] + (bias ? bias[j + c] : 0.0f);
    }
  }
#else
  (void)rows, (void)num_rows, (void)k, (void)w, (void)j0, (void)j1, (void)bias, (void)y, (void)ldy, (void)isa;
#endif
}

}  // namespace cypris::quant
