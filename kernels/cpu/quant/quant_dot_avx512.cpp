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
#include "kernels/cpu/quant/wq_kernels.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers build reductions from _mm256_undefined_si256(), which trips
// -W(maybe-)uninitialized in every caller; the values are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

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

// Multi-row kernels: one weight row against NR activation rows (NR = 1..4). Each weight block is
// loaded and decoded once and reused from registers for every activation row, which is what makes
// prefill (many rows) cheaper per row than decode.

// Two consecutive activation scales d[b], d[b + 1] as [d[b] x 8 | d[b + 1] x 8].
CYPRIS_AVX512 inline __m512 act_scale_pair(const float* d) {
  const __m512 two = _mm512_castpd_ps(_mm512_set1_pd(*reinterpret_cast<const double*>(d)));  // d0 d1 d0 d1 ...
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), two);
}

template <int NR>
CYPRIS_AVX512 void rows_q8_0(const void* w_row, const ActRow* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockQ8_0*>(w_row);
  const int64_t nb = k / kQK;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = load_2x256(w[b].qs, w[b + 1].qs);
    const __m512i aq = _mm512_abs_epi8(q);
    const __mmask64 neg = _mm512_movepi8_mask(q);
    const __m512 wd = fscale_pair(h2f(w[b].d), h2f(w[b + 1].d));
    for (int r = 0; r < NR; ++r) {
      const __m512i x = _mm512_loadu_si512(a[r].qs + b * kQK);
      const __m512i xs = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
      const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aq, xs);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, act_scale_pair(a[r].d + b)), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    float sum = _mm512_reduce_add_ps(acc[r]);
    if (b < nb) {  // an odd last block
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r].qs + b * kQK));
      const __m256i s =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
      sum += h2f(w[b].d) * a[r].d[b] * static_cast<float>(_mm512_reduce_add_epi32(_mm512_zextsi256_si512(s)));
    }
    out[r] = sum;
  }
}

CYPRIS_AVX512 inline __m256i q4_0_bytes(const BlockQ4_0& blk) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

// Q4_0 dotted as unsigned nibbles: the -8 comes back as -8 * d * sum(x) per block.
template <int NR>
CYPRIS_AVX512 void rows_q4_0(const void* w_row, const ActRow* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockQ4_0*>(w_row);
  const int64_t nb = k / kQK;
  __m512 acc[NR];
  float offset[NR], tail[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps(), offset[r] = tail[r] = 0.0f;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = _mm512_inserti64x4(_mm512_zextsi256_si512(q4_0_bytes(w[b])), q4_0_bytes(w[b + 1]), 1);
    const float d0 = h2f(w[b].d), d1 = h2f(w[b + 1].d);
    const __m512 wd = fscale_pair(d0, d1);
    for (int r = 0; r < NR; ++r) {
      const __m512i x = _mm512_loadu_si512(a[r].qs + b * kQK);
      const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, act_scale_pair(a[r].d + b)), acc[r]);
      const int16_t* bs = a[r].bsum + 2 * b;
      offset[r] += d0 * a[r].d[b] * static_cast<float>(bs[0] + bs[1]) +
                   d1 * a[r].d[b + 1] * static_cast<float>(bs[2] + bs[3]);
    }
  }
  for (; b < nb; ++b) {
    const __m256i q = q4_0_bytes(w[b]);
    const float d0 = h2f(w[b].d);
    for (int r = 0; r < NR; ++r) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r].qs + b * kQK));
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x);
      const float sc = d0 * a[r].d[b];
      tail[r] += sc * static_cast<float>(_mm512_reduce_add_epi32(_mm512_zextsi256_si512(s)));
      offset[r] += sc * static_cast<float>(a[r].bsum[2 * b] + a[r].bsum[2 * b + 1]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + tail[r] - 8.0f * offset[r];
}

// The 8 scales and 8 mins of a Q4_K/Q5_K block as 16 bytes (scales first), all at once: the same
// bit moves as k4_scale_min, done on 32-bit words.
CYPRIS_AVX512 inline __m128i k4_scales_mins(const uint8_t* packed) {
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);  // mins 4..7
  const uint32_t mins_lo = u[1] & k6;                       // mins 0..3
  u[1] = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);           // scales 4..7
  u[2] = mins_lo;
  u[0] &= k6;  // scales 0..3
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}

// vpshufb patterns that spread the int16 scale of group 2c over the low half of a register and
// that of group 2c + 1 over the high half, from the 8 scales broadcast to every 128-bit lane (an
// in-lane byte shuffle is cheaper than a cross-lane vpermw).
CYPRIS_AVX512 inline __m512i k4_chunk_shuffle(int c) {
  const short lo = static_cast<short>(((4 * c + 1) << 8) | (4 * c));
  const short hi = static_cast<short>(((4 * c + 3) << 8) | (4 * c + 2));
  return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

template <int NR>
CYPRIS_AVX512 void rows_q4_k(const void* w_row, const ActRow* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockQ4_K*>(w_row);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // Each min covers two groups of 16: lanes [m0 m0 m1 m1 ... m7 m7] from the mins at lanes 8..15.
  const __m256i min_index = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  const __m512i shuf[4] = {k4_chunk_shuffle(0), k4_chunk_shuffle(1), k4_chunk_shuffle(2), k4_chunk_shuffle(3)};
  __m512 acc[NR];
  __m256 accm[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / kQKK; ++b) {
    const __m256i sm16 = _mm256_cvtepu8_epi16(k4_scales_mins(w[b].scales));  // 8 scales, 8 mins
    const __m512i sc_all = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sm16));
    const __m256i mins16 = _mm256_permutexvar_epi16(min_index, sm16);
    __m512i q[4], sc[4];
    for (int c = 0; c < 4; ++c) {
      // 32 bytes hold 64 weights: low nibbles are elements 64c..64c+31, high nibbles the next 32.
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * c));
      q[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_zextsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), m4);
      sc[c] = _mm512_shuffle_epi8(sc_all, shuf[c]);
    }
    const float d = h2f(w[b].d), dmin = h2f(w[b].dmin);
    for (int r = 0; r < NR; ++r) {
      const int8_t* x = a[r].qs + b * kQKK;
      __m512i isum = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q[c], _mm512_loadu_si512(x + 64 * c)), sc[c]);
      }
      const float dx = a[r].d[b];
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dx * d), acc[r]);
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r].bsum + b * 16));
      accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mins16, bs)), _mm256_set1_ps(dx * dmin), accm[r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    const __m256 m = accm[r];
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    out[r] = _mm512_reduce_add_ps(acc[r]) - _mm_cvtss_f32(s);
  }
}

template <int NR>
CYPRIS_AVX512 void rows_q6_k(const void* w_row, const ActRow* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockQ6_K*>(w_row);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  // Shift counts per 256-bit half: the two halves of a register are bit pairs p and p + 1 of qh.
  const __m512i shl_01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr_23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  // Group (of 16 bytes = 8 int16 pair sums) of each int16 lane among the 4 groups of a register.
  const __m512i gidx = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                        0, 0, 0, 0, 0, 0);
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / kQKK; ++b) {
    // All 16 scales as int16; vpermw picks each lane's group scale.
    const __m256i sc256 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    const __m512i sc16 = _mm512_zextsi256_si512(sc256);
    __m512i q[4], s[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(w[b].ql + 64 * h);
      const __m256i qh256 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * h));
      const __m512i qh = _mm512_inserti64x4(_mm512_zextsi256_si512(qh256), qh256, 1);
      q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl_01), m30));
      q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                     _mm512_and_si512(_mm512_srlv_epi16(qh, shr_23), m30));
      s[2 * h] = _mm512_permutexvar_epi16(_mm512_add_epi16(gidx, _mm512_set1_epi16(static_cast<short>(8 * h))), sc16);
      s[2 * h + 1] =
          _mm512_permutexvar_epi16(_mm512_add_epi16(gidx, _mm512_set1_epi16(static_cast<short>(8 * h + 4))), sc16);
    }
    const float d = h2f(w[b].d);
    for (int r = 0; r < NR; ++r) {
      const int8_t* x = a[r].qs + b * kQKK;
      __m512i isum = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q[c], _mm512_loadu_si512(x + 64 * c)), s[c]);
      }
      // q was dotted unsigned (0..63): take away 32 * sum_g scale[g] * bsum[g].
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r].bsum + b * 16));
      const __m256i off = _mm256_madd_epi16(sc256, bs);
      isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(a[r].d[b] * d), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
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

// The multi-row kernels, instantiated for 1..kMaxDotRows rows.
#define CYPRIS_ROWS(name)                                                                       \
  void name##_n(const void* w, const ActRow* a, int nrows, int64_t k, float* out) {             \
    switch (nrows) {                                                                            \
      case 1: return name<1>(w, a, k, out);                                                     \
      case 2: return name<2>(w, a, k, out);                                                     \
      case 3: return name<3>(w, a, k, out);                                                     \
      default: return name<4>(w, a, k, out);                                                    \
    }                                                                                           \
  }
CYPRIS_ROWS(rows_q8_0)
CYPRIS_ROWS(rows_q4_0)
CYPRIS_ROWS(rows_q4_k)
CYPRIS_ROWS(rows_q6_k)
#undef CYPRIS_ROWS
static_assert(kMaxDotRows == 4);

}  // namespace

DotFn dot_fn_avx512(DType t) {
  switch (t) {
    case DType::Q8_0: return rows_q8_0_n;
    case DType::Q4_0: return rows_q4_0_n;
    case DType::Q4_K: return rows_q4_k_n;
    case DType::Q6_K: return rows_q6_k_n;
    case DType::Q4_1: return rows_of<dot_generic<DType::Q4_1>>;
    case DType::Q5_0: return rows_of<dot_generic<DType::Q5_0>>;
    case DType::Q5_1: return rows_of<dot_generic<DType::Q5_1>>;
    case DType::IQ4_NL: return rows_of<dot_generic<DType::IQ4_NL>>;
    case DType::Q2_K: return rows_of<dot_generic<DType::Q2_K>>;
    case DType::Q3_K: return rows_of<dot_generic<DType::Q3_K>>;
    case DType::Q5_K: return rows_of<dot_generic<DType::Q5_K>>;
    case DType::IQ4_XS: return rows_of<dot_generic<DType::IQ4_XS>>;
    default: return dot_fn_wq_avx2(t);  // GPTQ/AWQ repacked types: wq_dot_avx2.cpp
  }
}

}  // namespace cypris::quant

#else

namespace cypris::quant {
DotFn dot_fn_avx512(DType) { return nullptr; }
}  // namespace cypris::quant

#endif
