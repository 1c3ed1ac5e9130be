// x86 SIMD helpers shared by the CPU kernels that pick their instruction set at run time (the
// build targets plain x86-64; each fast function carries its own target attribute).
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers build reductions from _mm256_undefined_*(), which trips
// -W(maybe-)uninitialized in every caller; the values are never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace cypris::simd {

#if defined(__x86_64__)
#define CYPRIS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define CYPRIS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx2,fma,f16c")))

// AVX2 + FMA + F16C.
inline bool has_avx2_fma() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}

// AVX-512 F, BW and DQ (with the AVX2 set).
inline bool has_avx512() {
  static const bool has = has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return has;
}

// 16 elements of an F32, F16 or BF16 array from index i, as fp32.
template <DType DT>
CYPRIS_TARGET_AVX512 inline __m512 load16(const void* base, int64_t i) {
  if constexpr (DT == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (DT == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// fp8 codes widened in registers: e5m2 is the high byte of an fp16 with the same value; e4m3's
// sign, exponent and mantissa shifted into fp16 positions give its value times 2^-8 (the exponent
// bias is 7, not 15; subnormals land on fp16 subnormals), so the caller multiplies by 2^8. Both
// are exact, and folding the layer's scale into that factor (a power of two times the scale)
// rounds once, as fp32(code) * scale does.
inline float fp8_load_factor(DType t) { return t == DType::F8E4M3 ? 256.0f : 1.0f; }

// 16 fp8 codes (F8E4M3 or F8E5M2) from index i as fp32, times mul = fp8_load_factor * scale.
// e4m3's NaN codes (0x7F, 0xFF) read as 480 * scale: the cache writer saturates, never stores them.
template <DType DT>
CYPRIS_TARGET_AVX512 inline __m512 load16_fp8(const void* base, int64_t i, __m512 mul) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + i));
  __m256i h = _mm256_cvtepu8_epi16(b);
  if constexpr (DT == DType::F8E5M2) {
    h = _mm256_slli_epi16(h, 8);
  } else {
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x80)), 8);
    const __m256i mag = _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7F)), 7);
    h = _mm256_or_si256(sign, mag);
  }
  return _mm512_mul_ps(_mm512_cvtph_ps(h), mul);
}

// e^x for x <= 0 (softmax after the max is subtracted), relative error below 1e-7; x below -87
// gives 0 (as expf underflows), NaN stays NaN.
CYPRIS_TARGET_AVX512 inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln 2, high bits
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);  // ln 2, low bits
  // Taylor series to r^7 on |r| <= ln2 / 2: truncation below 1e-8.
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), _mm512_scalef_ps(p, n));
}
#endif

}  // namespace cypris::simd
