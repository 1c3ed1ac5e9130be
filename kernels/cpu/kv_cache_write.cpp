// write_kv_cache_cpu (attention.h): new K/V rows into their cache slots, converted to the cache type.
// The vector paths store exactly the scalar conversions' bits (dtype.h, kernels/common/fp8.h): fp16
// through F16C's round-to-nearest-even, bf16 and fp8 with the same integer rounding as the scalar
// code, lane by lane (fp8: x / scale, the exponent re-biased in place and the mantissa rounded to
// nearest even, fp8 subnormals by a per-lane variable shift, saturated to the largest finite code).
#include <cmath>
#include <cstring>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/simd.h"

namespace cypris {
namespace {

bool is_fp8(DType t) {
  return t == DType::F8E4M3 || t == DType::F8E5M2;
}

// The scalar conversions from element i on (the vector paths' tails and the plain C++ path).
void round_16_from(const float* x, int64_t i, int64_t n, DType dtype, uint16_t* out) {
  if (dtype == DType::BF16) {
    for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
  } else {
    for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
  }
}

void quantize_from(const float* x, int64_t i, int64_t n, float scale, DType dtype, uint8_t* out) {
  // Division, not a multiply by 1/scale: the CUDA kernel divides too, so both store the same bytes.
  if (dtype == DType::F8E4M3) {
    for (; i < n; ++i) out[i] = f32_to_fp8_e4m3(x[i] / scale);
  } else {
    for (; i < n; ++i) out[i] = f32_to_fp8_e5m2(x[i] / scale);
  }
}

// The fp8 format's parameters (fp8.h's encode<kMant, kBias, kMaxCode, kNanCode>).
struct Fp8Format {
  int mant, bias;
  uint32_t max_code, nan_code;
};

Fp8Format fp8_format(DType t) {
  return t == DType::F8E4M3 ? Fp8Format{3, 7, 0x7eu, 0x7fu} : Fp8Format{2, 15, 0x7bu, 0x7fu};
}

#if defined(__x86_64__)

// 16 fp32 -> bf16 words, rounded to nearest even; NaN -> the scalar code's quiet NaN.
CYPRIS_TARGET_AVX512 inline __m256i bf16_16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

// 16 fp32 -> fp16 words (F16C rounds to nearest even, as f32_to_f16); NaN -> sign | 0x7e00.
CYPRIS_TARGET_AVX512 inline __m256i f16_16(__m512 x) {
  const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i nan = _mm512_cvtepi32_epi16(_mm512_movm_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q)));
  const __m256i sign = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000)));
  return _mm256_blendv_epi8(h, _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00)), nan);
}

// x >> r rounded to nearest, ties to even, lane by lane (r in [1, 31]; x < 2^31).
CYPRIS_TARGET_AVX512 inline __m512i shift_rne16(__m512i x, __m512i r) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i q = _mm512_srlv_epi32(x, r);
  const __m512i rem = _mm512_and_si512(x, _mm512_sub_epi32(_mm512_sllv_epi32(one, r), one));
  const __m512i half = _mm512_sllv_epi32(one, _mm512_sub_epi32(r, one));
  const __mmask16 up =
      _mm512_cmpgt_epu32_mask(rem, half) | (_mm512_cmpeq_epi32_mask(rem, half) & _mm512_test_epi32_mask(q, one));
  return _mm512_mask_add_epi32(q, up, q, one);
}

// 16 fp32 (already divided by the scale) -> fp8 codes, as fp8.h's encode.
CYPRIS_TARGET_AVX512 inline __m128i fp8_16(__m512 x, const Fp8Format& f) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i exp = _mm512_srli_epi32(a, 23);
  const int emin = 1 - f.bias;
  // Normal in fp8: exponent re-biased in place, mantissa rounded away (a carry bumps the exponent).
  const __m512i normal =
      shift_rne16(_mm512_sub_epi32(a, _mm512_set1_epi32((127 - f.bias) << 23)), _mm512_set1_epi32(23 - f.mant));
  // Subnormal in fp8: m * 2^(exp - 150) / 2^(emin - mant), m = 0 for fp32 zeros and subnormals.
  const __mmask16 fp32_normal = _mm512_cmpgt_epi32_mask(exp, _mm512_setzero_si512());
  const __m512i m =
      _mm512_maskz_or_epi32(fp32_normal, _mm512_and_si512(a, _mm512_set1_epi32(0x7fffff)), _mm512_set1_epi32(0x800000));
  // Shifts past 24 give 0 as the scalar code's r >= 32 does (m < 2^24): clamped to 31.
  const __m512i r =
      _mm512_min_epi32(_mm512_sub_epi32(_mm512_set1_epi32(emin - f.mant + 150), exp), _mm512_set1_epi32(31));
  const __m512i sub = shift_rne16(m, r);
  const __mmask16 is_normal = _mm512_cmpge_epi32_mask(exp, _mm512_set1_epi32(127 + emin));
  __m512i code = _mm512_mask_mov_epi32(sub, is_normal, normal);
  code = _mm512_min_epu32(code, _mm512_set1_epi32(static_cast<int>(f.max_code)));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
  code = _mm512_mask_mov_epi32(code, nan, _mm512_set1_epi32(static_cast<int>(f.nan_code)));
  return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

CYPRIS_TARGET_AVX512 void write_row_avx512(const float* x, int64_t n, DType dtype, float scale, void* out) {
  int64_t i = 0;
  if (dtype == DType::F16 || dtype == DType::BF16) {
    auto* o = static_cast<uint16_t*>(out);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), dtype == DType::F16 ? f16_16(v) : bf16_16(v));
    }
    round_16_from(x, i, n, dtype, o);
  } else {
    auto* o = static_cast<uint8_t*>(out);
    const Fp8Format f = fp8_format(dtype);
    const __m512 s = _mm512_set1_ps(scale);
    for (; i + 16 <= n; i += 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), fp8_16(_mm512_div_ps(_mm512_loadu_ps(x + i), s), f));
    }
    quantize_from(x, i, n, scale, dtype, o);
  }
}

// The AVX2 versions, 8 lanes.
CYPRIS_TARGET_AVX2 inline __m256i shift_rne8(__m256i x, __m256i r) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i q = _mm256_srlv_epi32(x, r);
  const __m256i rem = _mm256_and_si256(x, _mm256_sub_epi32(_mm256_sllv_epi32(one, r), one));
  const __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(r, one));
  // rem > half as unsigned: both are below 2^31 (r <= 31, x < 2^31), so the signed compare is exact.
  const __m256i gt = _mm256_cmpgt_epi32(rem, half);
  const __m256i tie_odd =
      _mm256_and_si256(_mm256_cmpeq_epi32(rem, half), _mm256_cmpeq_epi32(_mm256_and_si256(q, one), one));
  return _mm256_sub_epi32(q, _mm256_or_si256(gt, tie_odd));  // a true mask is -1
}

// 8 int32 lanes holding values < 2^16 -> 8 uint16 words.
CYPRIS_TARGET_AVX2 inline __m128i pack_16(__m256i v) {
  const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
  return _mm256_castsi256_si128(p);
}

CYPRIS_TARGET_AVX2 inline __m128i bf16_8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return pack_16(_mm256_blendv_epi8(r, qnan, nan));
}

CYPRIS_TARGET_AVX2 inline __m128i f16_8(__m256 x) {
  const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i nan = pack_16(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)), 16));
  const __m128i fixed =
      _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000))), _mm_set1_epi16(0x7e00));
  return _mm_blendv_epi8(h, fixed, nan);
}

// 8 fp8 codes in the low 8 bytes.
CYPRIS_TARGET_AVX2 inline __m128i fp8_8(__m256 x, const Fp8Format& f) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i exp = _mm256_srli_epi32(a, 23);
  const int emin = 1 - f.bias;
  const __m256i normal =
      shift_rne8(_mm256_sub_epi32(a, _mm256_set1_epi32((127 - f.bias) << 23)), _mm256_set1_epi32(23 - f.mant));
  const __m256i fp32_normal = _mm256_cmpgt_epi32(exp, _mm256_setzero_si256());
  const __m256i m = _mm256_and_si256(
      fp32_normal, _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7fffff)), _mm256_set1_epi32(0x800000)));
  const __m256i r =
      _mm256_min_epi32(_mm256_sub_epi32(_mm256_set1_epi32(emin - f.mant + 150), exp), _mm256_set1_epi32(31));
  const __m256i sub = shift_rne8(m, r);
  const __m256i is_normal = _mm256_cmpgt_epi32(exp, _mm256_set1_epi32(127 + emin - 1));
  __m256i code = _mm256_blendv_epi8(sub, normal, is_normal);
  code = _mm256_min_epu32(code, _mm256_set1_epi32(static_cast<int>(f.max_code)));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(static_cast<int>(f.nan_code)), nan);
  const __m128i w = pack_16(_mm256_or_si256(code, sign));
  return _mm_packus_epi16(w, w);
}

CYPRIS_TARGET_AVX2 void write_row_avx2(const float* x, int64_t n, DType dtype, float scale, void* out) {
  int64_t i = 0;
  if (dtype == DType::F16 || dtype == DType::BF16) {
    auto* o = static_cast<uint16_t*>(out);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), dtype == DType::F16 ? f16_8(v) : bf16_8(v));
    }
    round_16_from(x, i, n, dtype, o);
  } else {
    auto* o = static_cast<uint8_t*>(out);
    const Fp8Format f = fp8_format(dtype);
    const __m256 s = _mm256_set1_ps(scale);
    for (; i + 8 <= n; i += 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + i), fp8_8(_mm256_div_ps(_mm256_loadu_ps(x + i), s), f));
    }
    quantize_from(x, i, n, scale, dtype, o);
  }
}
#endif

// One converted row (16-bit or fp8 cache) on the chosen path.
void write_row(const float* x, int64_t n, DType dtype, float scale, void* out, CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::Avx512) return write_row_avx512(x, n, dtype, scale, out);
  if (isa == CpuIsa::Avx2) return write_row_avx2(x, n, dtype, scale, out);
#endif
  if (is_fp8(dtype)) {
    quantize_from(x, 0, n, scale, dtype, static_cast<uint8_t*>(out));
  } else {
    round_16_from(x, 0, n, dtype, static_cast<uint16_t*>(out));
  }
}

}  // namespace

void write_kv_cache_cpu(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t num_tokens,
                        const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache, int64_t num_slots,
                        DType cache_dtype, float k_scale, float v_scale, CpuIsa isa) {
  CYPRIS_CHECK(is_kv_cache_dtype(cache_dtype), "KV cache write: unsupported cache type {}", dtype_name(cache_dtype));
  CYPRIS_CHECK(cpu_has_isa(isa), "KV cache write: this CPU has no {} instructions", cpu_isa_name(isa));
  if (isa == CpuIsa::Auto) {
    isa = cpu_has_isa(CpuIsa::Avx512) ? CpuIsa::Avx512 : cpu_has_isa(CpuIsa::Avx2) ? CpuIsa::Avx2 : CpuIsa::Scalar;
  }
  const bool fp8 = is_fp8(cache_dtype);
  CYPRIS_CHECK(!fp8 || (k_scale > 0.0f && v_scale > 0.0f && std::isfinite(k_scale) && std::isfinite(v_scale)),
               "KV cache write: scales must be positive (k_scale {}, v_scale {})", k_scale, v_scale);
  const size_t elem = dtype_size(cache_dtype);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    CYPRIS_CHECK(slot < num_slots, "slot_mapping[{}] = {} is outside the KV cache ({} slots)", t, slot, num_slots);
    void* kd = static_cast<char*>(k_cache) + static_cast<size_t>(slot * kv_width) * elem;
    void* vd = static_cast<char*>(v_cache) + static_cast<size_t>(slot * kv_width) * elem;
    if (cache_dtype == DType::F32) {
      std::memcpy(kd, k + t * ldk, sizeof(float) * kv_width);
      std::memcpy(vd, v + t * ldv, sizeof(float) * kv_width);
    } else {
      write_row(k + t * ldk, kv_width, cache_dtype, k_scale, kd, isa);
      write_row(v + t * ldv, kv_width, cache_dtype, v_scale, vd, isa);
    }
  }
}

}  // namespace cypris
