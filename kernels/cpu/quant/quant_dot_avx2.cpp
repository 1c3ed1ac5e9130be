// AVX2 quantized dot products and activation quantization.
//
// The hot types of llama.cpp's usual mixes (Q8_0, Q4_0, Q4_K, Q6_K) are decoded in registers: the
// 4-/6-bit values are unpacked with shifts and masks into unsigned bytes, multiplied with the
// signed 8-bit activations by vpmaddubsw (pairs into int16; no saturation: 63 * 127 * 2 < 32767),
// and the per-group integer scales applied by vpmaddwd, so a whole block accumulates in int32
// before one float multiply. Types whose value is offset (Q4_0: q - 8, Q6_K: q - 32) are dotted as
// unsigned and corrected with the activation group sums. The other types decode a block to the
// common form with the scalar unpack and then use the same integer dot (dot_generic).
#include "kernels/cpu/quant/quant_dot.h"
#include "kernels/cpu/quant/wq_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>

#include "kernels/common/quant_blocks.h"

namespace cypris::quant {
namespace {

#define CYPRIS_AVX2 __attribute__((target("avx2,fma,f16c")))

CYPRIS_AVX2 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

CYPRIS_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

CYPRIS_AVX2 inline float hsum_f32(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Signed x signed bytes: 16 int16 pair sums (|x| as the unsigned operand, y carrying x's sign).
CYPRIS_AVX2 inline __m256i mul_i8_pairs(__m256i x, __m256i y) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// Two int16 group scales: the low 128 bits (elements 0..15) get s0, the high ones s1.
CYPRIS_AVX2 inline __m256i scale_pair(int s0, int s1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(s1)), _mm_set1_epi16(static_cast<short>(s0)));
}

CYPRIS_AVX2 float dot_q8_0(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ8_0*>(w_row);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / kQK; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + b * kQK));
    const __m256i s = _mm256_madd_epi16(mul_i8_pairs(q, x), ones);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(w[b].d) * a.d[b]), acc);
  }
  return hsum_f32(acc);
}

CYPRIS_AVX2 float dot_q4_0(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ4_0*>(w_row);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float offset = 0.0f;
  for (int64_t b = 0; b < k / kQK; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + b * kQK));
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), ones);
    const float scale = h2f(w[b].d) * a.d[b];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(scale), acc);
    offset += scale * static_cast<float>(a.bsum[2 * b] + a.bsum[2 * b + 1]);
  }
  return hsum_f32(acc) - 8.0f * offset;
}

CYPRIS_AVX2 float dot_q4_k(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ4_K*>(w_row);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t b = 0; b < k / kQKK; ++b) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, w[b].scales, &sc[j], &mn[j]);
    const int16_t* bs = a.bsum + b * 16;
    int msum = 0;
    for (int j = 0; j < 8; ++j) msum += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
    const int8_t* x = a.qs + b * kQKK;
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * c));
      const __m256i lo = _mm256_and_si256(raw, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c + 32));
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_set1_epi16(sc[2 * c]));
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), _mm256_set1_epi16(sc[2 * c + 1]));
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
    }
    const float dx = a.d[b];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dx * h2f(w[b].d)), acc);
    mins += dx * h2f(w[b].dmin) * static_cast<float>(msum);
  }
  return hsum_f32(acc) - mins;
}

CYPRIS_AVX2 float dot_q6_k(const void* w_row, const ActRow& a, int64_t k) {
  const auto* w = static_cast<const BlockQ6_K*>(w_row);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / kQKK; ++b) {
    const int8_t* sc = w[b].scales;
    const int16_t* bs = a.bsum + b * 16;
    int offset = 0;
    for (int g = 0; g < 16; ++g) offset += sc[g] * bs[g];
    const int8_t* x = a.qs + b * kQKK;
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * h));
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
      };
      for (int p = 0; p < 4; ++p) {
        const int g = 8 * h + 2 * p;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 128 * h + 32 * p));
        const __m256i prod = _mm256_maddubs_epi16(q[p], xv);
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(prod, scale_pair(sc[g], sc[g + 1])));
      }
    }
    // q was dotted unsigned (0..63): take away 32 * sum_g scale[g] * bsum[g].
    const __m256i fix = _mm256_setr_epi32(-32 * offset, 0, 0, 0, 0, 0, 0, 0);
    isum = _mm256_add_epi32(isum, fix);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(a.d[b] * h2f(w[b].d)), acc);
  }
  return hsum_f32(acc);
}

// Any type: scalar unpack to the common form, then the integer dot of the reference in AVX2.
// Same integer sums and same float formula per block as dot_ref, so the result is bit-equal.
template <DType T>
CYPRIS_AVX2 float dot_generic(const void* w_row, const ActRow& a, int64_t k) {
  const int be = block_elems(T), bb = block_bytes(T);
  QuantUnpacked u;
  float sum = 0.0f;
  for (int64_t b = 0; b < k / be; ++b) {
    unpack_block(T, static_cast<const uint8_t*>(w_row) + b * bb, u);
    const int8_t* x = a.qs + b * be;
    const int16_t* bs = a.bsum + b * (be / 16);
    __m256i acc = _mm256_setzero_si256();
    int msum = 0;
    for (int g = 0; g < be / 16; g += 2) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q + 16 * g));
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16 * g));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(mul_i8_pairs(q, xv), scale_pair(u.scale[g], u.scale[g + 1])));
      msum += u.min[g] * bs[g] + u.min[g + 1] * bs[g + 1];
    }
    const int isum = hsum_i32(acc);
    sum += a.d[b] * (u.d * static_cast<float>(isum) - u.dmin * static_cast<float>(msum));
  }
  return sum;
}

}  // namespace

DotFn dot_fn_avx2(DType t) {
  switch (t) {
    case DType::Q8_0: return rows_of<dot_q8_0>;
    case DType::Q4_0: return rows_of<dot_q4_0>;
    case DType::Q4_K: return rows_of<dot_q4_k>;
    case DType::Q6_K: return rows_of<dot_q6_k>;
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

// Same arithmetic as quantize_acts_ref: d = amax / 127 and 1 / d in scalar float, products rounded
// half-to-even by vcvtps2dq (the default MXCSR rounding), so the bytes are identical.
CYPRIS_AVX2 void quantize_acts_avx2(const float* x, int64_t k, int block, int8_t* qs, float* d, int16_t* bsum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lim = _mm256_set1_ps(127.0f);
  for (int64_t b = 0; b < k / block; ++b) {
    const float* xb = x + b * block;
    __m256 mx = _mm256_setzero_ps();
    for (int i = 0; i < block; i += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    const __m256 vid = _mm256_set1_ps(id);
    for (int i = 0; i < block; i += 32) {
      __m256i v[4];
      for (int j = 0; j < 4; ++j) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(xb + i + 8 * j), vid);
        p = _mm256_max_ps(_mm256_min_ps(p, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
        v[j] = _mm256_cvtps_epi32(p);
      }
      // packs works within 128-bit lanes: fix the order with one permute at the end.
      const __m256i w01 = _mm256_packs_epi32(v[0], v[1]);
      const __m256i w23 = _mm256_packs_epi32(v[2], v[3]);
      __m256i bytes = _mm256_packs_epi16(w01, w23);
      bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + b * block + i), bytes);
      // Group sums of 16: widen to int16 and add pairs down to one value per 16 bytes.
      const __m256i ones8 = _mm256_set1_epi8(1);
      const __m256i pairs = _mm256_maddubs_epi16(ones8, bytes);  // 16 x int16, 2 bytes each
      const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));  // 8 x int32, 4 bytes each
      alignas(32) int32_t q4[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(q4), quads);
      const int64_t g = (b * block + i) / 16;
      bsum[g] = static_cast<int16_t>(q4[0] + q4[1] + q4[2] + q4[3]);
      bsum[g + 1] = static_cast<int16_t>(q4[4] + q4[5] + q4[6] + q4[7]);
    }
  }
}

}  // namespace cypris::quant

#else  // not x86-64

namespace cypris::quant {
DotFn dot_fn_avx2(DType) { return nullptr; }
void quantize_acts_avx2(const float*, int64_t, int, int8_t*, float*, int16_t*) {}
}  // namespace cypris::quant

#endif
