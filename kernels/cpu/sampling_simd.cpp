// SIMD kernels of sampling_simd.h, written with GCC/Clang vector extensions (8 floats per vector: one AVX
// register, two SSE registers on the baseline build); target_clones adds an AVX2+FMA version picked at
// load time.
#include "kernels/cpu/sampling_simd.h"

#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"  // the 32-byte vectors only live inside this file

namespace cypris::cpu_sampling {
namespace {

typedef float V8f __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));

inline V8f splat(float v) {
  return V8f{v, v, v, v, v, v, v, v};
}

inline V8f load(const float* p) {
  V8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Same polynomial as fast_exp(), eight lanes at a time.
inline V8f vexp(V8f x) {
  const V8f lo = splat(-87.0f), hi = splat(88.0f);
  V8f xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const V8f magic = splat(12582912.0f);
  const V8f fn = (xc * splat(1.44269504088896341f) + magic) - magic;
  const V8f r = xc - fn * splat(0.693359375f) - fn * splat(-2.12194440e-4f);
  V8f p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * r * r + r + splat(1.0f);
  const V8i n = __builtin_convertvector(fn, V8i);
  const V8i bits = (n + 127) << 23;
  V8f scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const V8f res = p * scale;
  return x < lo ? splat(0.0f) : res;
}

}  // namespace

__attribute__((target_clones("avx2", "default"))) float max_of(const float* x, int32_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  V8f acc = splat(kNegInf);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8f v = load(x + i);
    acc = v > acc ? v : acc;
  }
  float m = kNegInf;
  for (int j = 0; j < 8; ++j) m = std::max(m, acc[j]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

__attribute__((target_clones("avx2", "default"))) double sum_exp(const float* x, int32_t n, float m) {
  double total = 0.0;
  const int32_t n8 = n & ~7;
  const V8f mv = splat(m);
  for (int32_t start = 0; start < n8; start += 4096) {
    const int32_t end = std::min(n8, start + 4096);
    V8f acc = splat(0.0f);
    for (int32_t i = start; i < end; i += 8) acc += vexp(load(x + i) - mv);
    for (int j = 0; j < 8; ++j) total += acc[j];
  }
  for (int32_t i = n8; i < n; ++i) total += fast_exp(x[i] - m);
  return total;
}

__attribute__((target_clones("avx2", "default"))) double exp_shifted(const float* x, int32_t n, float m, float* out) {
  double total = 0.0;
  const int32_t n8 = n & ~7;
  const V8f mv = splat(m);
  for (int32_t start = 0; start < n8; start += 4096) {
    const int32_t end = std::min(n8, start + 4096);
    V8f acc = splat(0.0f);
    for (int32_t i = start; i < end; i += 8) {
      const V8f e = vexp(load(x + i) - mv);
      std::memcpy(out + i, &e, sizeof(e));
      acc += e;
    }
    for (int j = 0; j < 8; ++j) total += acc[j];
  }
  for (int32_t i = n8; i < n; ++i) total += (out[i] = fast_exp(x[i] - m));
  return total;
}

__attribute__((target_clones("avx2", "default"))) double sum_where_ge(const float* x, const float* e, int32_t n,
                                                                      float t) {
  double total = 0.0;
  const int32_t n8 = n & ~7;
  const V8f tv = splat(t), zero = splat(0.0f);
  for (int32_t start = 0; start < n8; start += 4096) {
    const int32_t end = std::min(n8, start + 4096);
    V8f acc = zero;
    for (int32_t i = start; i < end; i += 8) acc += load(x + i) >= tv ? load(e + i) : zero;
    for (int j = 0; j < 8; ++j) total += acc[j];
  }
  for (int32_t i = n8; i < n; ++i) total += x[i] >= t ? e[i] : 0.0f;
  return total;
}

__attribute__((target_clones("avx2", "default"))) void block_max64(const float* x, int32_t num_blocks, float* out) {
  for (int32_t b = 0; b < num_blocks; ++b) {
    const float* p = x + static_cast<size_t>(b) * 64;
    V8f acc = load(p);
    for (int j = 8; j < 64; j += 8) {
      const V8f v = load(p + j);
      acc = v > acc ? v : acc;
    }
    float m = acc[0];
    for (int j = 1; j < 8; ++j) m = std::max(m, acc[j]);
    out[b] = m;
  }
}

int32_t argmax_of(const float* x, int32_t n) {
  if (n <= 0) return 0;
  const float m = max_of(x, n);
  for (int32_t i = 0; i < n; ++i) {
    if (x[i] == m) return i;
  }
  return 0;  // all NaN
}

}  // namespace cypris::cpu_sampling
