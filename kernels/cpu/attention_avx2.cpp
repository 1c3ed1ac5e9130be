// The AVX2 path of paged attention (attention_group.h), for CPUs without AVX-512: the AVX-512 path's
// structure in 8 lanes with 16 registers — heads in blocks of 4, 2, 1; values in passes over blocks
// of up to 8 / H chunks of 8 elements, so at most 8 accumulators are live.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/attention_group.h"
#include "kernels/cpu/simd.h"

namespace cypris::attention_detail {

#if defined(__x86_64__)
namespace {

// Cached rows are scattered (one KV head's slice of each token, a block's rows 1.5-4 KB apart), too
// far apart for the hardware prefetchers: each loop asks for the row kPrefetchRows ahead itself.
constexpr int64_t kPrefetchRows = 12;

template <DType CT>
inline void prefetch_row(const void* base, int64_t elem_offset, int elems) {
  constexpr int64_t kSize = CT == DType::F32 ? 4 : (CT == DType::F16 || CT == DType::BF16) ? 2 : 1;
  const auto first = reinterpret_cast<uintptr_t>(static_cast<const char*>(base) + elem_offset * kSize);
  const uintptr_t last = first + static_cast<uintptr_t>(elems * kSize) - 1;
  for (uintptr_t line = first & ~uintptr_t{63}; line <= last; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
  }
}

template <DType CT>
CYPRIS_TARGET_AVX2 inline __m256 load_cached(const void* base, int64_t i, __m256 mul) {
  if constexpr (CT == DType::F8E4M3 || CT == DType::F8E5M2) {
    return simd::load8_fp8<CT>(base, i, mul);
  } else {
    return simd::load8<CT>(base, i);
  }
}

template <DType CT, int H>
CYPRIS_TARGET_AVX2 void group_scores(const GroupAttention& a, int h0) {
  const int chunks = a.d / 8;
  const __m256 mul = _mm256_set1_ps(a.k_mul);
  for (int64_t j = 0; j < a.n; ++j) {
    if (j + kPrefetchRows < a.n) prefetch_row<CT>(a.k_cache, a.offsets[j + kPrefetchRows], a.d);
    __m256 acc[H];
    for (int h = 0; h < H; ++h) acc[h] = _mm256_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
      const __m256 k = load_cached<CT>(a.k_cache, a.offsets[j] + c * 8, mul);
      for (int h = 0; h < H; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(a.q + (h0 + h) * a.d + c * 8), k, acc[h]);
    }
    for (int h = 0; h < H; ++h) {
      float sv = simd::reduce_add8(acc[h]) * a.scale;
      if (a.softcap > 0.0f) sv = a.softcap * std::tanh(sv / a.softcap);
      a.scores[(h0 + h) * a.n + j] = sv;
    }
  }
}

CYPRIS_TARGET_AVX2 float softmax_unnormalised(float* s, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  float mx = simd::reduce_max8(vmax);
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = simd::exp_nonpositive8(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = simd::reduce_add8(vsum);
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  return sum;
}

template <DType CT, int H, int CB>
CYPRIS_TARGET_AVX2 void group_values(const GroupAttention& a, int h0, int c0, const float* inv_sum) {
  const __m256 mul = _mm256_set1_ps(a.v_mul);
  __m256 acc[H][CB];
  for (int h = 0; h < H; ++h) {
    for (int c = 0; c < CB; ++c) acc[h][c] = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < a.n; ++j) {
    const int64_t row = a.offsets[j] + c0 * 8;
    if (j + kPrefetchRows < a.n) prefetch_row<CT>(a.v_cache, a.offsets[j + kPrefetchRows] + c0 * 8, CB * 8);
    __m256 w[H];
    for (int h = 0; h < H; ++h) w[h] = _mm256_set1_ps(a.scores[(h0 + h) * a.n + j]);
    for (int c = 0; c < CB; ++c) {
      const __m256 v = load_cached<CT>(a.v_cache, row + c * 8, mul);
      for (int h = 0; h < H; ++h) acc[h][c] = _mm256_fmadd_ps(w[h], v, acc[h][c]);
    }
  }
  for (int h = 0; h < H; ++h) {
    const __m256 inv = _mm256_set1_ps(inv_sum[h0 + h]);
    for (int c = 0; c < CB; ++c) {
      _mm256_storeu_ps(a.out + (h0 + h) * a.d + (c0 + c) * 8, _mm256_mul_ps(acc[h][c], inv));
    }
  }
}

template <DType CT, int H>
CYPRIS_TARGET_AVX2 void group_values_all(const GroupAttention& a, int h0, const float* inv_sum) {
  constexpr int kBlock = 8 / H;
  const int chunks = a.d / 8;
  int c0 = 0;
  for (; c0 + kBlock <= chunks; c0 += kBlock) group_values<CT, H, kBlock>(a, h0, c0, inv_sum);
  for (; c0 < chunks; ++c0) group_values<CT, H, 1>(a, h0, c0, inv_sum);
}

template <DType CT>
CYPRIS_TARGET_AVX2 void attend(const GroupAttention& a, int group, float* inv_sum) {
  auto blocks = [&](auto step) {
    int h0 = 0;
    for (; h0 + 4 <= group; h0 += 4) step(std::integral_constant<int, 4>{}, h0);
    for (; h0 + 2 <= group; h0 += 2) step(std::integral_constant<int, 2>{}, h0);
    for (; h0 < group; ++h0) step(std::integral_constant<int, 1>{}, h0);
  };
  blocks([&](auto h, int h0) { group_scores<CT, decltype(h)::value>(a, h0); });
  for (int h = 0; h < group; ++h) inv_sum[h] = 1.0f / softmax_unnormalised(a.scores + h * a.n, a.n);
  blocks([&](auto h, int h0) { group_values_all<CT, decltype(h)::value>(a, h0, inv_sum); });
}

}  // namespace

void attend_group_avx2(DType cache_dtype, const GroupAttention& a, int group, float* inv_sum) {
  switch (cache_dtype) {
    case DType::F32:
      attend<DType::F32>(a, group, inv_sum);
      break;
    case DType::F16:
      attend<DType::F16>(a, group, inv_sum);
      break;
    case DType::F8E4M3:
      attend<DType::F8E4M3>(a, group, inv_sum);
      break;
    case DType::F8E5M2:
      attend<DType::F8E5M2>(a, group, inv_sum);
      break;
    default:
      attend<DType::BF16>(a, group, inv_sum);
      break;
  }
}
#else
void attend_group_avx2(DType, const GroupAttention&, int, float*) {}
#endif

}  // namespace cypris::attention_detail
