// AVX-512 (F, BW, VL, VNNI) quantized dot products.
//
// As the AVX2 kernels, one 512-bit register holds 64 weights decoded to bytes. Unsigned weights
// (Q4_0, Q4_K, Q6_K before their offset) meet the signed activations in vpdpbusd (Q4_0: one
// scale per 32, applied in float lanes) or in vpmaddubsw + vpdpwssd (the K-quants: the int16 pair
// sums are multiplied by the per-group scale and accumulated in int32 in one instruction, so a
// whole super-block stays integer until one float multiply). Signed Q8_0 weights use |w| and the
// activations with w's sign folded in (a masked negate), as vpdpbusd needs one unsigned operand.
// Other types: scalar unpack to the common form, then an integer dot (dot_generic).
#include "kernels/cpu/quant/quant_dot.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers build reductions from _mm256_undefined_si256(), which trips
// -W(maybe-)uninitialized in every caller; the values are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/common/quant_blocks.h"

namespace cypris::quant {
namespace {

#define CYPRIS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx2,fma,f16c")))

CYPRIS_AVX512 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

CYPRIS_AVX512 inline __m512i load_2x256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// Scales for two halves of a register: lanes of the low 256 bits get s0, of the high ones s1.
CYPRIS_AVX512 inline __m512 fscale_pair(float s0, float s1) {
  return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}
CYPRIS_AVX512 inline __m512i iscale_pair16(int s0, int s1) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(s0)), _mm256_set1_epi16(static_cast<short>(s1)), 1);
}

CYPRIS_AVX512 float dot_q8_0(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ8_0*>(w_row);
  const int64_t nb = k / kQK;
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = load_2x256(w[b].qs, w[b + 1].qs);
    const __m512i x = _mm512_loadu_si512(a.qs + b * kQK);
    const __mmask64 neg = _mm512_movepi8_mask(q);
    const __m512i xs = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), xs);
    const __m512 scale = fscale_pair(h2f(w[b].d) * a.d[b], h2f(w[b + 1].d) * a.d[b + 1]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  for (; b < nb; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + b * kQK));
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
    alignas(32) int32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), s);
    const int is = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    sum += h2f(w[b].d) * a.d[b] * static_cast<float>(is);
  }
  return sum;
}

CYPRIS_AVX512 inline __m256i q4_0_bytes(const BlockQ4_0& blk) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

CYPRIS_AVX512 float dot_q4_0(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ4_0*>(w_row);
  const int64_t nb = k / kQK;
  __m512 acc = _mm512_setzero_ps();
  float offset = 0.0f, tail = 0.0f;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = _mm512_inserti64x4(_mm512_zextsi256_si512(q4_0_bytes(w[b])), q4_0_bytes(w[b + 1]), 1);
    const __m512i x = _mm512_loadu_si512(a.qs + b * kQK);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x);
    const float s0 = h2f(w[b].d) * a.d[b], s1 = h2f(w[b + 1].d) * a.d[b + 1];
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), fscale_pair(s0, s1), acc);
    offset += s0 * static_cast<float>(a.bsum[2 * b] + a.bsum[2 * b + 1]) +
              s1 * static_cast<float>(a.bsum[2 * b + 2] + a.bsum[2 * b + 3]);
  }
  for (; b < nb; ++b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + b * kQK));
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q4_0_bytes(w[b]), x);
    alignas(32) int32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), s);
    const int is = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    const float sc = h2f(w[b].d) * a.d[b];
    tail += sc * static_cast<float>(is);
    offset += sc * static_cast<float>(a.bsum[2 * b] + a.bsum[2 * b + 1]);
  }
  return _mm512_reduce_add_ps(acc) + tail - 8.0f * offset;
}

CYPRIS_AVX512 float dot_q4_k(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ4_K*>(w_row);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc = _mm512_setzero_ps();
  float mins = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, w[b].scales, &sc[j], &mn[j]);
    const int16_t* bs = a.bsum + b * 16;
    int msum = 0;
    for (int j = 0; j < 8; ++j) msum += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
    const int8_t* x = a.qs + b * kQKK;
    __m512i isum = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      // 32 bytes hold 64 weights: low nibbles are elements 64c..64c+31, high nibbles the next 32.
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * c));
      const __m512i both = _mm512_inserti64x4(_mm512_zextsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1);
      const __m512i q = _mm512_and_si512(both, m4);
      const __m512i xv = _mm512_loadu_si512(x + 64 * c);
      isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q, xv), iscale_pair16(sc[2 * c], sc[2 * c + 1]));
    }
    const float dx = a.d[b];
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dx * h2f(w[b].d)), acc);
    mins += dx * h2f(w[b].dmin) * static_cast<float>(msum);
  }
  return _mm512_reduce_add_ps(acc) - mins;
}

CYPRIS_AVX512 float dot_q6_k(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ6_K*>(w_row);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  // Shift counts per 256-bit half: the two halves of a register are bit pairs p and p + 1 of qh.
  const __m512i shl_01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr_23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  // Group (of 16 bytes = 8 int16 pair sums) of each int16 lane among the 4 groups of a register.
  const __m512i gidx = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                        0, 0, 0, 0, 0, 0);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / kQKK; ++b) {
    const int8_t* sc = w[b].scales;
    const int16_t* bs = a.bsum + b * 16;
    // All 16 scales as int16; vpermw picks each lane's group scale.
    const __m512i sc16 = _mm512_zextsi256_si512(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
    const __m256i bs16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bs));
    const __m256i off = _mm256_madd_epi16(_mm512_castsi512_si256(sc16), bs16);
    const int8_t* x = a.qs + b * kQKK;
    __m512i isum = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(w[b].ql + 64 * h);
      const __m256i qh256 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * h));
      const __m512i qh = _mm512_inserti64x4(_mm512_zextsi256_si512(qh256), qh256, 1);
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl_01), m30));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_and_si512(_mm512_srlv_epi16(qh, shr_23), m30));
      const __m512i x01 = _mm512_loadu_si512(x + 128 * h);
      const __m512i x23 = _mm512_loadu_si512(x + 128 * h + 64);
      const __m512i s01 = _mm512_permutexvar_epi16(_mm512_add_epi16(gidx, _mm512_set1_epi16(8 * h)), sc16);
      const __m512i s23 = _mm512_permutexvar_epi16(_mm512_add_epi16(gidx, _mm512_set1_epi16(8 * h + 4)), sc16);
      isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q01, x01), s01);
      isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q23, x23), s23);
    }
    // q was dotted unsigned (0..63): take away 32 * sum_g scale[g] * bsum[g].
    isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(a.d[b] * h2f(w[b].d)), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

template <DType T>
CYPRIS_AVX512 float dot_generic(const void* w_row, const ActRow& a, int64_t k) {
  const int be = block_elems(T), bb = block_bytes(T);
  const __m512i gidx = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                        0, 0, 0, 0, 0, 0);
  QuantUnpacked u;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / be; ++b) {
    unpack_block(T, static_cast<const uint8_t*>(w_row) + b * bb, u);
    const int8_t* x = a.qs + b * be;
    const int16_t* bs = a.bsum + b * (be / 16);
    int isum, msum = 0;
    for (int g = 0; g < be / 16; ++g) msum += u.min[g] * bs[g];
    if (be == kQK) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q));
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
      const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q));
      const __m256i s = _mm256_madd_epi16(
          p, _mm256_set_m128i(_mm_set1_epi16(u.scale[1]), _mm_set1_epi16(u.scale[0])));
      alignas(32) int32_t t[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(t), s);
      isum = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    } else {
      const __m512i sc16 = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.scale)));
      __m512i acc = _mm512_setzero_si512();
      for (int g = 0; g < 16; g += 4) {
        const __m512i q = _mm512_loadu_si512(u.q + 16 * g);
        const __m512i xv = _mm512_loadu_si512(x + 16 * g);
        const __mmask64 neg = _mm512_movepi8_mask(q);
        const __m512i xs = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
        const __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(q), xs);
        const __m512i s = _mm512_permutexvar_epi16(_mm512_add_epi16(gidx, _mm512_set1_epi16(static_cast<short>(g))), sc16);
        acc = _mm512_dpwssd_epi32(acc, p, s);
      }
      isum = _mm512_reduce_add_epi32(acc);
    }
    sum += a.d[b] * (u.d * static_cast<float>(isum) - u.dmin * static_cast<float>(msum));
  }
  return sum;
}

}  // namespace

DotFn dot_fn_avx512(DType t) {
  switch (t) {
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_0: return dot_q4_0;
    case DType::Q4_K: return dot_q4_k;
    case DType::Q6_K: return dot_q6_k;
    case DType::Q4_1: return dot_generic<DType::Q4_1>;
    case DType::Q5_0: return dot_generic<DType::Q5_0>;
    case DType::Q5_1: return dot_generic<DType::Q5_1>;
    case DType::IQ4_NL: return dot_generic<DType::IQ4_NL>;
    case DType::Q2_K: return dot_generic<DType::Q2_K>;
    case DType::Q3_K: return dot_generic<DType::Q3_K>;
    case DType::Q5_K: return dot_generic<DType::Q5_K>;
    case DType::IQ4_XS: return dot_generic<DType::IQ4_XS>;
    default: return nullptr;
  }
}

}  // namespace cypris::quant

#else

namespace cypris::quant {
DotFn dot_fn_avx512(DType) { return nullptr; }
}  // namespace cypris::quant

#endif
