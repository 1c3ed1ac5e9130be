// AVX2 dots of the repacked checkpoint types (wq_kernels.h) with up to four 8-bit activation rows.
//
// Per block, w = d * (q - z): the unsigned 4-bit values (or the signed 8-bit q - 128) are dotted
// with the activations as integers (vpmaddubsw into int16 pairs: 15 * 127 * 2 and 128 * 127 * 2
// are below 32767, then vpmaddwd into int32), the block scale applied once per block in float
// lanes, and the zero point subtracted through the activation group sums, as dot_q4_0 does with
// its fixed 8: d * d_x * (sum q x - z * sum x). Each block is decoded once for all rows.
#include "kernels/cpu/quant/wq_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/common/wq_blocks.h"

namespace cypris::quant {
namespace {

#define CYPRIS_AVX2 __attribute__((target("avx2,fma,f16c")))

CYPRIS_AVX2 inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

CYPRIS_AVX2 inline float hsum_f32(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of the activation group sums of one block (its N / 16 groups).
template <int N>
inline int block_xsum(const int16_t* bsum, int64_t b) {
  int s = 0;
  for (int g = 0; g < N / 16; ++g) s += bsum[b * (N / 16) + g];
  return s;
}

template <int N, int R>
CYPRIS_AVX2 void dot_w4(const void* w_row, const ActRow* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockW4<N>*>(w_row);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[R];
  float off[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), off[r] = 0.0f;
  for (int64_t b = 0; b < k / N; ++b) {
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int s = 0; s < N / 32; ++s) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs + 16 * s));
      const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
      for (int r = 0; r < R; ++r) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r].qs + b * N + 32 * s));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), ones));
      }
    }
    const float d = h2f(w[b].d);
    for (int r = 0; r < R; ++r) {
      const float sc = d * a[r].d[b];
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(sc), acc[r]);
      off[r] += sc * static_cast<float>(w[b].z * block_xsum<N>(a[r].bsum, b));
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum_f32(acc[r]) - off[r];
}

template <int N, int R>
CYPRIS_AVX2 void dot_w8(const void* w_row, const ActRow* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockW8<N>*>(w_row);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  float off[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), off[r] = 0.0f;
  for (int64_t b = 0; b < k / N; ++b) {
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int s = 0; s < N / 32; ++s) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * s));
      const __m256i qa = _mm256_sign_epi8(q, q);  // |q| as the unsigned operand, q's sign moved to x
      for (int r = 0; r < R; ++r) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r].qs + b * N + 32 * s));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(qa, _mm256_sign_epi8(x, q)), ones));
      }
    }
    const float d = h2f(w[b].d);
    for (int r = 0; r < R; ++r) {
      const float sc = d * a[r].d[b];
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(sc), acc[r]);
      off[r] += sc * static_cast<float>(w[b].z * block_xsum<N>(a[r].bsum, b));
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum_f32(acc[r]) - off[r];
}

template <int N>
void rows_w4(const void* w_row, const ActRow* a, int nrows, int64_t k, float* out) {
  switch (nrows) {
    case 1:
      return dot_w4<N, 1>(w_row, a, k, out);
    case 2:
      return dot_w4<N, 2>(w_row, a, k, out);
    case 3:
      return dot_w4<N, 3>(w_row, a, k, out);
    default:
      return dot_w4<N, 4>(w_row, a, k, out);
  }
}

template <int N>
void rows_w8(const void* w_row, const ActRow* a, int nrows, int64_t k, float* out) {
  switch (nrows) {
    case 1:
      return dot_w8<N, 1>(w_row, a, k, out);
    case 2:
      return dot_w8<N, 2>(w_row, a, k, out);
    case 3:
      return dot_w8<N, 3>(w_row, a, k, out);
    default:
      return dot_w8<N, 4>(w_row, a, k, out);
  }
}

}  // namespace

DotFn dot_fn_wq_avx2(DType t) {
  switch (t) {
    case DType::W4G32:
      return rows_w4<32>;
    case DType::W4G64:
      return rows_w4<64>;
    case DType::W4G128:
      return rows_w4<128>;
    case DType::W8G32:
      return rows_w8<32>;
    case DType::W8G128:
      return rows_w8<128>;
    default:
      return nullptr;
  }
}

}  // namespace cypris::quant

#else  // not x86-64

namespace cypris::quant {
DotFn dot_fn_wq_avx2(DType) {
  return nullptr;
}
}  // namespace cypris::quant

#endif
