// The AVX-512 path of paged attention (attention_group.h): 16 lanes, H heads' accumulators in
// registers. Scores walk the cached K rows once (a row's chunks accumulate per head, one horizontal
// sum per row and head); values walk the V rows once per block of up to 4 chunks (64 elements), so
// for head dims up to 64 (and 128 with two passes over L2-resident rows) each V row is streamed in
// one go with 4 independent accumulator chains per head instead of one chain per chunk.
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

// 16 cached elements from index i as fp32 (fp8: times mul).
template <DType CT>
CYPRIS_TARGET_AVX512 inline __m512 load_cached(const void* base, int64_t i, __m512 mul) {
  if constexpr (CT == DType::F8E4M3 || CT == DType::F8E5M2) {
    return simd::load16_fp8<CT>(base, i, mul);
  } else {
    return simd::load16<CT>(base, i);
  }
}

template <DType CT, int H>
CYPRIS_TARGET_AVX512 void group_scores(const GroupAttention& a, int h0) {
  const int chunks = a.d / 16;
  const __m512 mul = _mm512_set1_ps(a.k_mul);
  for (int64_t j = 0; j < a.n; ++j) {
    if (j + kPrefetchRows < a.n) prefetch_row<CT>(a.k_cache, a.offsets[j + kPrefetchRows], a.d);
    __m512 acc[H];
    for (int h = 0; h < H; ++h) acc[h] = _mm512_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
      const __m512 k = load_cached<CT>(a.k_cache, a.offsets[j] + c * 16, mul);
      for (int h = 0; h < H; ++h) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(a.q + (h0 + h) * a.d + c * 16), k, acc[h]);
    }
    for (int h = 0; h < H; ++h) {
      float sv = _mm512_reduce_add_ps(acc[h]) * a.scale;
      if (a.softcap > 0.0f) sv = a.softcap * std::tanh(sv / a.softcap);
      a.scores[(h0 + h) * a.n + j] = sv;
    }
  }
}

// scores[0, n) become softmax weights (not yet divided by their sum); returns the sum.
CYPRIS_TARGET_AVX512 float softmax_unnormalised(float* s, int64_t n) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  float mx = _mm512_reduce_max_ps(vmax);
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  const __m512 m = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= n; j += 16) {
    const __m512 e = simd::exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
    _mm512_storeu_ps(s + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (j < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = simd::exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), m));
    _mm512_mask_storeu_ps(s + j, mask, e);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(mask, e));
  }
  return _mm512_reduce_add_ps(vsum);
}

// Output chunks [c0, c0 + CB) of H heads: one pass over the V rows with H x CB accumulators.
template <DType CT, int H, int CB>
CYPRIS_TARGET_AVX512 void group_values(const GroupAttention& a, int h0, int c0, const float* inv_sum) {
  const __m512 mul = _mm512_set1_ps(a.v_mul);
  __m512 acc[H][CB];
  for (int h = 0; h < H; ++h) {
    for (int c = 0; c < CB; ++c) acc[h][c] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < a.n; ++j) {
    const int64_t row = a.offsets[j] + c0 * 16;
    if (j + kPrefetchRows < a.n) prefetch_row<CT>(a.v_cache, a.offsets[j + kPrefetchRows] + c0 * 16, CB * 16);
    __m512 w[H];
    for (int h = 0; h < H; ++h) w[h] = _mm512_set1_ps(a.scores[(h0 + h) * a.n + j]);
    for (int c = 0; c < CB; ++c) {
      const __m512 v = load_cached<CT>(a.v_cache, row + c * 16, mul);
      for (int h = 0; h < H; ++h) acc[h][c] = _mm512_fmadd_ps(w[h], v, acc[h][c]);
    }
  }
  for (int h = 0; h < H; ++h) {
    const __m512 inv = _mm512_set1_ps(inv_sum[h0 + h]);
    for (int c = 0; c < CB; ++c) {
      _mm512_storeu_ps(a.out + (h0 + h) * a.d + (c0 + c) * 16, _mm512_mul_ps(acc[h][c], inv));
    }
  }
}

template <DType CT, int H>
CYPRIS_TARGET_AVX512 void group_values_all(const GroupAttention& a, int h0, const float* inv_sum) {
  constexpr int kBlock = H <= 4 ? 4 : 2;  // H x kBlock <= 16 accumulators
  const int chunks = a.d / 16;
  int c0 = 0;
  for (; c0 + kBlock <= chunks; c0 += kBlock) group_values<CT, H, kBlock>(a, h0, c0, inv_sum);
  for (; c0 < chunks; ++c0) group_values<CT, H, 1>(a, h0, c0, inv_sum);
}

// Heads in register blocks of 8, 4, 2, 1.
template <DType CT>
CYPRIS_TARGET_AVX512 void attend(const GroupAttention& a, int group, float* inv_sum) {
  auto blocks = [&](auto step) {
    int h0 = 0;
    for (; h0 + 8 <= group; h0 += 8) step(std::integral_constant<int, 8>{}, h0);
    for (; h0 + 4 <= group; h0 += 4) step(std::integral_constant<int, 4>{}, h0);
    for (; h0 + 2 <= group; h0 += 2) step(std::integral_constant<int, 2>{}, h0);
    for (; h0 < group; ++h0) step(std::integral_constant<int, 1>{}, h0);
  };
  blocks([&](auto h, int h0) { group_scores<CT, decltype(h)::value>(a, h0); });
  for (int h = 0; h < group; ++h) inv_sum[h] = 1.0f / softmax_unnormalised(a.scores + h * a.n, a.n);
  blocks([&](auto h, int h0) { group_values_all<CT, decltype(h)::value>(a, h0, inv_sum); });
}

}  // namespace

void attend_group_avx512(DType cache_dtype, const GroupAttention& a, int group, float* inv_sum) {
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
void attend_group_avx512(DType, const GroupAttention&, int, float*) {}
#endif

}  // namespace cypris::attention_detail
