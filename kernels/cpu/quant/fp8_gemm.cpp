// FP8 linear (see fp8_gemm.h): scalar and AVX2 dots of F8G128 weight rows with fp32 activations.
//
// AVX2 decode: an e4m3 code placed in the upper bits of an fp16 (sign to bit 15, the 7 exponent
// and mantissa bits to bits 13..7) is the same value times 2^-8, for normals and subnormals alike
// (both formats' exponent fields line up, biases 7 and 15); F16C widens 8 of them to fp32 at once,
// and the 2^8 goes into the block scale. One decode per block serves up to four activation rows.
#include "kernels/cpu/quant/fp8_gemm.h"

#include <algorithm>
#include <array>
#include <functional>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/common/fp8_blocks.h"
#include "kernels/cpu/quant/tile_dot_rows.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cypris {
namespace quant {
namespace {

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) v[c] = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    return v;
  }();
  return t;
}

void dot_scalar(const void* w_row, const float* const* x, int nrows, int64_t k, float* out) {
  const auto& lut = e4m3_table();
  const auto* w = static_cast<const BlockF8*>(w_row);
  for (int r = 0; r < nrows; ++r) {
    float total = 0.0f;
    for (int64_t b = 0; b < k / kF8Block; ++b) {
      const float* xb = x[r] + b * kF8Block;
      float s = 0.0f;
      for (int i = 0; i < kF8Block; ++i) s += lut[w[b].qs[i]] * xb[i];
      total += w[b].d * s;
    }
    out[r] = total;
  }
}

#if defined(__x86_64__)
#define CYPRIS_AVX2 __attribute__((target("avx2,fma,f16c")))

CYPRIS_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 e4m3 codes -> 8 floats, each 2^-8 times its value.
CYPRIS_AVX2 inline __m256 decode8(const uint8_t* q) {
  const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x80)), 8);
  const __m128i mag = _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x7f)), 7);
  return _mm256_cvtph_ps(_mm_or_si128(sign, mag));
}

template <int R>
CYPRIS_AVX2 void dot_avx2_rows(const BlockF8* w, const float* const* x, int64_t k, float* out) {
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / kF8Block; ++b) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int i = 0; i < kF8Block; i += 8) {
      const __m256 wv = decode8(w[b].qs + i);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r] + b * kF8Block + i), acc[r]);
    }
    const __m256 d = _mm256_set1_ps(w[b].d * 256.0f);  // exact: a power of two
    for (int r = 0; r < R; ++r) total[r] = _mm256_fmadd_ps(acc[r], d, total[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(total[r]);
}

CYPRIS_AVX2 void dot_avx2(const void* w_row, const float* const* x, int nrows, int64_t k, float* out) {
  const auto* w = static_cast<const BlockF8*>(w_row);
  switch (nrows) {
    case 1:
      return dot_avx2_rows<1>(w, x, k, out);
    case 2:
      return dot_avx2_rows<2>(w, x, k, out);
    case 3:
      return dot_avx2_rows<3>(w, x, k, out);
    default:
      return dot_avx2_rows<4>(w, x, k, out);
  }
}
#endif

constexpr int64_t kMTile = 32;

void check_k(int64_t k) {
  CYPRIS_CHECK(k % kF8Block == 0, "fp8 linear: row length {} is not a multiple of the F8G128 block (128 values)", k);
}

}  // namespace

void dequantize_f8_row(const void* src, float* dst, int64_t n) {
  check_k(n);
  const auto& lut = e4m3_table();
  const auto* w = static_cast<const BlockF8*>(src);
  for (int64_t b = 0; b < n / kF8Block; ++b) {
    for (int i = 0; i < kF8Block; ++i) dst[b * kF8Block + i] = lut[w[b].qs[i]] * w[b].d;
  }
}

F8DotFn f8_dot_fn(Isa isa) {
#if defined(__x86_64__)
  if (isa != Isa::Scalar && isa_available(Isa::Avx2)) return dot_avx2;
#endif
  return dot_scalar;
}

}  // namespace quant

void f8_gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, const float* bias,
                 float* y, int64_t ldy, ThreadPool* pool, quant::Isa isa) {
  quant::check_k(k);
  if (m == 0 || n == 0) return;
  const quant::FloatActs acts{x, k, ldx};
  const quant::F8DotFn dot = quant::f8_dot_fn(isa);
  const auto* wb = static_cast<const uint8_t*>(w);
  const size_t row_bytes = dtype_nbytes(DType::F8G128, k);
  quant::run_on(pool, n, 8, [&](int64_t j0, int64_t j1) {
    quant::tile_dot_rows<quant::kMTile, quant::kMaxDotRows>(acts, dot, 0, m, wb, row_bytes, j0, j1, bias, y, ldy);
  });
}

void f8_gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups, int64_t n,
                         float* y, int64_t ldy, ThreadPool* pool) {
  quant::check_k(k);
  std::vector<GemmGroup> live;
  for (int64_t g = 0; g < num_groups; ++g)
    if (groups[g].rows > 0) live.push_back(groups[g]);
  if (live.empty() || n == 0) return;
  const quant::FloatActs acts{x, k, ldx};
  const quant::F8DotFn dot = quant::f8_dot_fn(quant::best_isa());
  const size_t row_bytes = dtype_nbytes(DType::F8G128, k);
  parallel_for_groups(
      pool, static_cast<int64_t>(live.size()), n,
      [&](int64_t g, int64_t j0, int64_t j1) {
        const GemmGroup& gr = live[static_cast<size_t>(g)];
        quant::tile_dot_rows<quant::kMTile, quant::kMaxDotRows>(acts, dot, gr.first, gr.first + gr.rows,
                                                                static_cast<const uint8_t*>(gr.w), row_bytes, j0, j1,
                                                                nullptr, y, ldy);
      },
      8);
}

}  // namespace cypris
