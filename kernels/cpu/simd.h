// x86 SIMD helpers shared by the CPU kernels that pick their instruction set at run time (the
// build targets plain x86-64; each fast function carries its own target attribute).
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"
#include "kernels/cpu/immintrin_quiet.h"

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
  static const bool has = has_avx2_fma() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq");
  return has;
}

// 16 elements of an F32, F16 or BF16 array from index i, as fp32.
template <DType DT>
CYPRIS_TARGET_AVX512 inline __m512 load16(const void* base, int64_t i) {
  if constexpr (DT == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (DT == DType::F16) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
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
inline float fp8_load_factor(DType t) {
  return t == DType::F8E4M3 ? 256.0f : 1.0f;
}

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

// The AVX2 counterparts (8 lanes) for CPUs without AVX-512.

// 8 elements of an F32, F16 or BF16 array from index i, as fp32.
template <DType DT>
CYPRIS_TARGET_AVX2 inline __m256 load8(const void* base, int64_t i) {
  if constexpr (DT == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (DT == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// 8 fp8 codes from index i as fp32, times mul = fp8_load_factor * scale (as load16_fp8).
template <DType DT>
CYPRIS_TARGET_AVX2 inline __m256 load8_fp8(const void* base, int64_t i, __m256 mul) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + i));
  __m128i h = _mm_cvtepu8_epi16(b);
  if constexpr (DT == DType::F8E5M2) {
    h = _mm_slli_epi16(h, 8);
  } else {
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x80)), 8);
    const __m128i mag = _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7F)), 7);
    h = _mm_or_si128(sign, mag);
  }
  return _mm256_mul_ps(_mm256_cvtph_ps(h), mul);
}

CYPRIS_TARGET_AVX2 inline float reduce_add8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

CYPRIS_TARGET_AVX2 inline float reduce_max8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x for x <= 0, as exp_nonpositive: x below -87 gives 0, NaN stays NaN. 2^n is built in the
// exponent field (n >= -126 after the clamp, so it stays a normal number).
CYPRIS_TARGET_AVX2 inline __m256 exp_nonpositive8(__m256 x) {
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  const __m256 x0 = x;
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_blendv_ps(_mm256_andnot_ps(under, y), x0, nan);
}
#endif

}  // namespace cypris::simd
