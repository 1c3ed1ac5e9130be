// bitsandbytes 4-bit linear (see bnb_gemm.h): scalar, AVX2 and AVX-512 dots of NF4G64 / FP4G64 weight
// rows with fp32 activations. One decode of a block serves up to four activation rows.
#include "kernels/cpu/quant/bnb_gemm.h"

#include <functional>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/bnb_blocks.h"
#include "kernels/cpu/quant/tile_dot_rows.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cypris {
namespace quant {
namespace {

// The scalar reference: per block the fp32 sum of table[q] * x in element order, times d.
template <bool kNf4>
void dot_scalar(const void* w_row, const float* const* x, int nrows, int64_t k, float* out) {
  const float* table = kNf4 ? kNf4Table : kFp4Table;
  const auto* w = static_cast<const BlockB4*>(w_row);
  for (int r = 0; r < nrows; ++r) {
    float total = 0.0f;
    for (int64_t b = 0; b < k / kB4Block; ++b) {
      const float* xb = x[r] + b * kB4Block;
      float s = 0.0f;
      for (int j = 0; j < kB4Block; ++j) s += table[b4_code(w[b].qs, j)] * xb[j];
      total += w[b].d * s;
    }
    out[r] = total;
  }
}

#if defined(__x86_64__)
#define CYPRIS_AVX2 __attribute__((target("avx2,fma")))
#define CYPRIS_AVX512 __attribute__((target("avx512f,avx2,fma")))  // AVX-512 F only: no VNNI needed

CYPRIS_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 codes (int32 lanes, 0..15) -> their table values: vpermps of each half of the table, the upper
// half where bit 3 is set (moved to the sign bit for the blend).
CYPRIS_AVX2 inline __m256 lookup8(__m256i codes, __m256 lo, __m256 hi) {
  const __m256 a = _mm256_permutevar8x32_ps(lo, codes), b = _mm256_permutevar8x32_ps(hi, codes);
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)));
}

template <bool kNf4, int R>
CYPRIS_AVX2 void dot_avx2_rows(const BlockB4* w, const float* const* x, int64_t k, float* out) {
  const float* table = kNf4 ? kNf4Table : kFp4Table;
  const __m256 lo = _mm256_loadu_ps(table), hi = _mm256_loadu_ps(table + 8);
  const __m256i mask = _mm256_set1_epi32(0xF);
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / kB4Block; ++b) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    const float* xb[R];
    for (int r = 0; r < R; ++r) xb[r] = x[r] + b * kB4Block;
    for (int j = 0; j < 32; j += 8) {  // bytes j..j+7: elements j..j+7 (low), j+32..j+39 (high)
      const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].qs + j)));
      const __m256 wl = lookup8(_mm256_and_si256(c, mask), lo, hi);
      const __m256 wh = lookup8(_mm256_srli_epi32(c, 4), lo, hi);
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(wl, _mm256_loadu_ps(xb[r] + j), acc[r]);
        acc[r] = _mm256_fmadd_ps(wh, _mm256_loadu_ps(xb[r] + 32 + j), acc[r]);
      }
    }
    const __m256 d = _mm256_set1_ps(w[b].d);
    for (int r = 0; r < R; ++r) total[r] = _mm256_fmadd_ps(acc[r], d, total[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(total[r]);
}

template <bool kNf4>
CYPRIS_AVX2 void dot_avx2(const void* w_row, const float* const* x, int nrows, int64_t k, float* out) {
  const auto* w = static_cast<const BlockB4*>(w_row);
  switch (nrows) {
    case 1: return dot_avx2_rows<kNf4, 1>(w, x, k, out);
    case 2: return dot_avx2_rows<kNf4, 2>(w, x, k, out);
    case 3: return dot_avx2_rows<kNf4, 3>(w, x, k, out);
    default: return dot_avx2_rows<kNf4, 4>(w, x, k, out);
  }
}

template <bool kNf4, int R>
CYPRIS_AVX512 void dot_avx512_rows(const BlockB4* w, const float* const* x, int64_t k, float* out) {
  const __m512 table = _mm512_loadu_ps(kNf4 ? kNf4Table : kFp4Table);
  const __m512i mask = _mm512_set1_epi32(0xF);
  __m512 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < k / kB4Block; ++b) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const float* xb[R];
    for (int r = 0; r < R; ++r) xb[r] = x[r] + b * kB4Block;
    for (int j = 0; j < 32; j += 16) {  // bytes j..j+15: elements j..j+15 (low), j+32..j+47 (high)
      const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs + j)));
      const __m512 wl = _mm512_permutexvar_ps(_mm512_and_si512(c, mask), table);
      const __m512 wh = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), table);
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm512_fmadd_ps(wl, _mm512_loadu_ps(xb[r] + j), acc[r]);
        acc[r] = _mm512_fmadd_ps(wh, _mm512_loadu_ps(xb[r] + 32 + j), acc[r]);
      }
    }
    const __m512 d = _mm512_set1_ps(w[b].d);
    for (int r = 0; r < R; ++r) total[r] = _mm512_fmadd_ps(acc[r], d, total[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(total[r]);
}

template <bool kNf4>
CYPRIS_AVX512 void dot_avx512(const void* w_row, const float* const* x, int nrows, int64_t k, float* out) {
  const auto* w = static_cast<const BlockB4*>(w_row);
  switch (nrows) {
    case 1: return dot_avx512_rows<kNf4, 1>(w, x, k, out);
    case 2: return dot_avx512_rows<kNf4, 2>(w, x, k, out);
    case 3: return dot_avx512_rows<kNf4, 3>(w, x, k, out);
    default: return dot_avx512_rows<kNf4, 4>(w, x, k, out);
  }
}
#endif

constexpr int64_t kMTile = 32;

void check(DType t, int64_t k) {
  CYPRIS_CHECK(is_b4(t), "bitsandbytes linear: {} is not NF4G64 or FP4G64", dtype_name(t));
  CYPRIS_CHECK(k % kB4Block == 0, "bitsandbytes linear: row length {} is not a multiple of the {} block (64 values)",
               k, dtype_name(t));
}

}  // namespace

bool is_b4(DType t) { return t == DType::NF4G64 || t == DType::FP4G64; }

const float* b4_table(DType t) { return t == DType::NF4G64 ? kNf4Table : kFp4Table; }

void dequantize_b4_row(DType t, const void* src, float* dst, int64_t n) {
  check(t, n);
  const float* table = b4_table(t);
  const auto* w = static_cast<const BlockB4*>(src);
  for (int64_t b = 0; b < n / kB4Block; ++b) {
    for (int j = 0; j < kB4Block; ++j) dst[b * kB4Block + j] = table[b4_code(w[b].qs, j)] * w[b].d;
  }
}

B4DotFn b4_dot_fn(DType t, Isa isa) {
  const bool nf4 = t == DType::NF4G64;
#if defined(__x86_64__)
  // The AVX-512 dot needs only AVX-512 F (Isa::Avx512 is chosen on VNNI CPUs, and tests ask for it
  // explicitly wherever AVX-512 F is there).
  if (isa == Isa::Avx512 && __builtin_cpu_supports("avx512f")) return nf4 ? dot_avx512<true> : dot_avx512<false>;
  if (isa != Isa::Scalar && isa_available(Isa::Avx2)) return nf4 ? dot_avx2<true> : dot_avx2<false>;
#endif
  return nf4 ? dot_scalar<true> : dot_scalar<false>;
}

}  // namespace quant

void b4_gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
                 const float* bias, float* y, int64_t ldy, ThreadPool* pool, quant::Isa isa) {
  quant::check(w_dtype, k);
  if (m == 0 || n == 0) return;
  const quant::FloatActs acts{x, k, ldx};
  const quant::B4DotFn dot = quant::b4_dot_fn(w_dtype, isa);
  const auto* wb = static_cast<const uint8_t*>(w);
  const size_t row_bytes = dtype_nbytes(w_dtype, k);
  quant::run_on(pool, n, 8, [&](int64_t j0, int64_t j1) {
    quant::tile_dot_rows<quant::kMTile, quant::kMaxDotRows>(acts, dot, 0, m, wb, row_bytes, j0, j1, bias, y, ldy);
  });
}

void b4_gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups,
                         DType w_dtype, int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  quant::check(w_dtype, k);
  std::vector<GemmGroup> live;
  for (int64_t g = 0; g < num_groups; ++g)
    if (groups[g].rows > 0) live.push_back(groups[g]);
  if (live.empty() || n == 0) return;
  const quant::FloatActs acts{x, k, ldx};
  const quant::B4DotFn dot = quant::b4_dot_fn(w_dtype, quant::best_isa());
  const size_t row_bytes = dtype_nbytes(w_dtype, k);
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
