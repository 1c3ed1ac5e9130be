// Float kernels for the samplers' full-vocabulary passes (max, sum of exp, argmax). A 128k vocabulary
// times hundreds of rows makes these the hot loops of a sampling step; the compiler does not
// vectorise float reductions by itself (no -ffast-math), so sampling_simd.cpp does it explicitly.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace cypris::cpu_sampling {

// e^x with ~1 ulp error (Cephes expf polynomial) for x in [-87, 88]; exactly 0 below -87
// (so -inf, the mask value, gives 0).
inline float fast_exp(float x) {
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = xc - fn * 0.693359375f - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t n = static_cast<int32_t>(fn);
  const float scale = std::bit_cast<float>((n + 127) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}

// Full-vocabulary reductions, SIMD (GCC vector extensions, AVX2 clone when the CPU has it).
float max_of(const float* x, int32_t n);
// sum(exp(x - m)) over n values (masked -inf entries add 0).
double sum_exp(const float* x, int32_t n, float m);
// out[i] = exp(x[i] - m); returns their sum.
double exp_shifted(const float* x, int32_t n, float m, float* out);
// Sum of e[i] over the i with x[i] >= t.
double sum_where_ge(const float* x, const float* e, int32_t n, float t);
// out[b] = max of x[64b .. 64b + 63] for b < num_blocks.
void block_max64(const float* x, int32_t num_blocks, float* out);
// Index of the first maximum (0 when n == 0).
int32_t argmax_of(const float* x, int32_t n);

}  // namespace cypris::cpu_sampling
