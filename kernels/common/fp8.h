// fp8 <-> fp32 conversions for the fp8 KV cache, shared by the CPU kernels (the reference) and the
// CUDA kernels so both store and read exactly the same bytes. Plain bit manipulation, usable from
// host and device code, no cuda_fp8.h.
//
// Formats (OCP 8-bit floating point, as vLLM / PyTorch float8_e4m3fn and float8_e5m2):
//  * e4m3 ("fp8", "fp8_e4m3"): 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; the only
//    NaN codes are S.1111.111 (0x7f, 0xff). Largest finite 448 = 1.75 * 2^8; smallest subnormal 2^-9.
//  * e5m2 ("fp8_e5m2"): 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: exponent 31 is inf
//    (mantissa 0) or NaN. Largest finite 57344 = 1.75 * 2^15; smallest subnormal 2^-16.
//
// fp32 -> fp8 rounds to nearest, ties to even, and SATURATES: values beyond the largest finite
// value, infinities included, become +-max (like cuda_fp8's __NV_SATFINITE, which vLLM uses for its
// KV cache). A KV cache must never hold an inf: one inf key turns the softmax into NaN for the rest
// of the sequence, whereas a clipped outlier only perturbs one score. NaN stays NaN.
// fp8 -> fp32 is exact (every fp8 value is an fp32 value).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CYPRIS_FP8_HD __host__ __device__ __forceinline__
#else
#define CYPRIS_FP8_HD inline
#endif

namespace cypris {
namespace fp8_detail {

CYPRIS_FP8_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

CYPRIS_FP8_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// x >> r rounded to nearest, ties to even (r in [0, 63]).
CYPRIS_FP8_HD uint32_t shift_rne(uint32_t x, int r) {
  if (r == 0) return x;
  if (r >= 32) return 0;  // x < 2^32 <= half of 2^(r+1): below half an ulp
  const uint32_t q = x >> r;
  const uint32_t rem = x & ((uint32_t{1} << r) - 1u);
  const uint32_t half = uint32_t{1} << (r - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// kMant mantissa bits, exponent bias kBias, kMaxCode the largest finite magnitude code, kNanCode the
// magnitude code written for NaN.
template <int kMant, int kBias, uint32_t kMaxCode, uint32_t kNanCode>
CYPRIS_FP8_HD uint8_t encode(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | kNanCode);
  const int exp = static_cast<int>(a >> 23);  // biased fp32 exponent (0: zero or subnormal)
  const int emin = 1 - kBias;                 // unbiased exponent of the smallest fp8 normal
  uint32_t code;
  if (exp - 127 >= emin) {
    // Normal in fp8: re-bias the exponent in place and round the mantissa away; a carry out of the
    // mantissa bumps the exponent, which is exactly the right encoding.
    code = shift_rne(a - (static_cast<uint32_t>(127 - kBias) << 23), 23 - kMant);
  } else {
    // Subnormal in fp8: the code is |x| / 2^(emin - kMant) rounded to an integer; rounding up to
    // 2^kMant gives the smallest normal's code. fp32 subnormals are far below half an fp8 ulp.
    const uint32_t m = exp == 0 ? 0u : ((a & 0x7fffffu) | 0x800000u);  // |x| = m * 2^(exp - 150)
    code = shift_rne(m, emin - kMant + 150 - exp);
  }
  if (code > kMaxCode) code = kMaxCode;
  return static_cast<uint8_t>(sign | code);
}

template <int kMant, int kBias>
CYPRIS_FP8_HD float decode_finite(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c & 0x7fu) >> kMant;
  const uint32_t m = c & ((1u << kMant) - 1u);
  if (e == 0) {
    // m * 2^(1 - bias - kMant): both factors are exact in fp32, and so is the product.
    const float mag = static_cast<float>(m) * bits_f32(static_cast<uint32_t>(127 + 1 - kBias - kMant) << 23);
    return bits_f32(f32_bits(mag) | sign);
  }
  return bits_f32(sign | ((e + 127u - kBias) << 23) | (m << (23 - kMant)));
}

}  // namespace fp8_detail

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

CYPRIS_FP8_HD uint8_t f32_to_fp8_e4m3(float x) {
  return fp8_detail::encode<3, 7, 0x7eu, 0x7fu>(x);
}
CYPRIS_FP8_HD uint8_t f32_to_fp8_e5m2(float x) {
  return fp8_detail::encode<2, 15, 0x7bu, 0x7fu>(x);
}

CYPRIS_FP8_HD float fp8_e4m3_to_f32(uint8_t c) {
  if ((c & 0x7fu) == 0x7fu) return fp8_detail::bits_f32(0x7fc00000u | (static_cast<uint32_t>(c & 0x80u) << 24));
  return fp8_detail::decode_finite<3, 7>(c);
}

CYPRIS_FP8_HD float fp8_e5m2_to_f32(uint8_t c) {
  if ((c & 0x7cu) == 0x7cu) {  // exponent 31: inf (mantissa 0) or NaN
    const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
    return fp8_detail::bits_f32(sign | ((c & 0x3u) ? 0x7fc00000u : 0x7f800000u));
  }
  return fp8_detail::decode_finite<2, 15>(c);
}

}  // namespace cypris
