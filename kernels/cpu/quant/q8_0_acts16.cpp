// Q8_0 weights with 16-bit activations (see q8_0_acts16.h): quantizer, scalar / AVX2 / AVX-512 dot
// kernels and the linear layer built on them.
//
// Work split as quant_gemm.cpp: the activations are quantized once (2 bytes per value), the pool
// splits the weight rows, and each weight row meets every activation row of an m-tile while it is
// in L1, so the weights stream from memory once. The m-tile is half quant_gemm's (the activations
// take twice the bytes).
#include "kernels/cpu/quant/q8_0_acts16.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/immintrin_quiet.h"
#include "kernels/cpu/quant/q8_0_tiled.h"
#include "kernels/cpu/quant/tile_dot_rows.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace quant {

void quantize_acts16(const float* x, int64_t k, int16_t* qs, float* d) {
  for (int64_t g0 = 0; g0 < k; g0 += kActs16Group) {
    const int64_t n = std::min<int64_t>(kActs16Group, k - g0);
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[g0 + i]));
    const float dg = amax / 32767.0f;
    const float id = dg != 0.0f ? 1.0f / dg : 0.0f;
    d[g0 / kActs16Group] = dg;
    for (int64_t i = 0; i < n; ++i) {
      const float v = std::nearbyint(x[g0 + i] * id);  // round half to even
      qs[g0 + i] = static_cast<int16_t>(std::fmax(-32767.0f, std::fmin(32767.0f, v)));
    }
  }
}

float dot_q8_0_acts16_ref(const void* w_row, const ActRow16& a, int64_t k) {
  const auto* w = static_cast<const BlockQ8_0*>(w_row);
  constexpr int kGroupBlocks = kActs16Group / kQK;
  const int64_t nb = k / kQK;
  float sum = 0.0f;
  for (int64_t g0 = 0; g0 < nb; g0 += kGroupBlocks) {
    float gsum = 0.0f;
    for (int64_t b = g0; b < std::min<int64_t>(g0 + kGroupBlocks, nb); ++b) {
      int32_t isum = 0;
      for (int i = 0; i < kQK; ++i) isum += w[b].qs[i] * a.qs[b * kQK + i];
      gsum += f16_to_f32(w[b].d) * static_cast<float>(isum);
    }
    sum += a.d[g0 / kGroupBlocks] * gsum;
  }
  return sum;
}

namespace {

void rows_ref(const void* w_row, const ActRow16* a, int nrows, int64_t k, float* out) {
  for (int r = 0; r < nrows; ++r) out[r] = dot_q8_0_acts16_ref(w_row, a[r], k);
}

#if defined(__x86_64__)
#define CYPRIS_A16_AVX2 __attribute__((target("avx2,fma,f16c")))
#define CYPRIS_A16_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

constexpr int kGroupBlocks = kActs16Group / kQK;

// quantize_acts16 in 8 lanes: the same max, scale, products and round-half-even (cvtps_epi32 under
// the default rounding mode), clamped before the rounding instead of after (32767 is an integer, so
// the result is the same).
CYPRIS_A16_AVX2 void quantize_acts16_avx2(const float* x, int64_t k, int16_t* qs, float* d) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 lim = _mm256_set1_ps(32767.0f), nlim = _mm256_set1_ps(-32767.0f);
  for (int64_t g0 = 0; g0 < k; g0 += kActs16Group) {
    const int64_t n = std::min<int64_t>(kActs16Group, k - g0);  // a multiple of 32
    const float* xg = x + g0;
    __m256 mx = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xg + i), abs_mask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float dg = amax / 32767.0f;
    const float id = dg != 0.0f ? 1.0f / dg : 0.0f;
    d[g0 / kActs16Group] = dg;
    const __m256 vid = _mm256_set1_ps(id);
    for (int64_t i = 0; i < n; i += 16) {
      const __m256 a = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(xg + i), vid), nlim), lim);
      const __m256 b = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(xg + i + 8), vid), nlim), lim);
      const __m256i p = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));  // lane-interleaved
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + g0 + i), _mm256_permute4x64_epi64(p, 0xD8));
    }
  }
}

// Per block: the 32 weights widened to int16 once, vpmaddwd with each row's activations (pairs of
// products summed in int32: at most 2 * 127 * 32767 < 2^24, exact as float), then one fmadd by the
// block's d_w (a register shared by the rows); each row's d_x once per group of 8 blocks.
template <int NR>
CYPRIS_A16_AVX512 void rows_avx512(const void* w_row, const ActRow16* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockQ8_0*>(w_row);
  const int64_t nb = k / kQK;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < nb; g0 += kGroupBlocks) {
    const int64_t g1 = std::min<int64_t>(g0 + kGroupBlocks, nb);
    __m512 t[NR];
    for (int r = 0; r < NR; ++r) t[r] = _mm512_setzero_ps();
    for (int64_t b = g0; b < g1; ++b) {
      const __m512i w16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs)));
      const __m512 wd = _mm512_set1_ps(_cvtsh_ss(w[b].d));
      for (int r = 0; r < NR; ++r) {
        const __m512i p = _mm512_madd_epi16(w16, _mm512_loadu_si512(a[r].qs + b * kQK));
        t[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), wd, t[r]);
      }
    }
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_fmadd_ps(t[r], _mm512_set1_ps(a[r].d[g0 / kGroupBlocks]), acc[r]);
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// As the AVX-512 kernel in two halves of 16; the halves' int32 sums (4 products each, < 2^24) are
// added before the conversion.
template <int NR>
CYPRIS_A16_AVX2 void rows_avx2(const void* w_row, const ActRow16* a, int64_t k, float* out) {
  const auto* w = static_cast<const BlockQ8_0*>(w_row);
  const int64_t nb = k / kQK;
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t g0 = 0; g0 < nb; g0 += kGroupBlocks) {
    const int64_t g1 = std::min<int64_t>(g0 + kGroupBlocks, nb);
    __m256 t[NR];
    for (int r = 0; r < NR; ++r) t[r] = _mm256_setzero_ps();
    for (int64_t b = g0; b < g1; ++b) {
      const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs)));
      const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs + 16)));
      const __m256 wd = _mm256_set1_ps(_cvtsh_ss(w[b].d));
      for (int r = 0; r < NR; ++r) {
        const int16_t* x = a[r].qs + b * kQK;
        const __m256i p =
            _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
                             _mm256_madd_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16))));
        t[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), wd, t[r]);
      }
    }
    for (int r = 0; r < NR; ++r) acc[r] = _mm256_fmadd_ps(t[r], _mm256_set1_ps(a[r].d[g0 / kGroupBlocks]), acc[r]);
  }
  for (int r = 0; r < NR; ++r) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    out[r] = _mm_cvtss_f32(s);
  }
}

#define CYPRIS_A16_ROWS(name)                                                         \
  void name##_n(const void* w, const ActRow16* a, int nrows, int64_t k, float* out) { \
    switch (nrows) {                                                                  \
      case 1:                                                                         \
        return name<1>(w, a, k, out);                                                 \
      case 2:                                                                         \
        return name<2>(w, a, k, out);                                                 \
      case 3:                                                                         \
        return name<3>(w, a, k, out);                                                 \
      case 4:                                                                         \
        return name<4>(w, a, k, out);                                                 \
      case 5:                                                                         \
        return name<5>(w, a, k, out);                                                 \
      case 6:                                                                         \
        return name<6>(w, a, k, out);                                                 \
      case 7:                                                                         \
        return name<7>(w, a, k, out);                                                 \
      default:                                                                        \
        return name<8>(w, a, k, out);                                                 \
    }                                                                                 \
  }
CYPRIS_A16_ROWS(rows_avx512)
CYPRIS_A16_ROWS(rows_avx2)
#undef CYPRIS_A16_ROWS
static_assert(kActs16Rows == 8);
#endif

}  // namespace

Quantize16Fn quantize_acts16_fn(Isa isa) {
#if defined(__x86_64__)
  if (isa != Isa::Scalar && isa_available(Isa::Avx2)) return quantize_acts16_avx2;
#endif
  return quantize_acts16;
}

Dot16Fn dot_q8_0_acts16_fn(Isa isa) {
  if (!isa_available(isa)) return nullptr;
  switch (isa) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return rows_avx512_n;
    case Isa::Avx2:
      return rows_avx2_n;
#endif
    default:
      return rows_ref;
  }
}

}  // namespace quant

namespace {

constexpr int64_t kMTile = 16;
using quant::kQK;

struct Acts16 {
  std::vector<int16_t>* qs;
  std::vector<float>* ds;
  int64_t k;
  quant::ActRow16 row(int64_t i) const { return {qs->data() + i * k, ds->data() + i * quant::acts16_groups(k)}; }
};

Acts16 quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, ThreadPool* pool, quant::Isa isa) {
  const quant::Quantize16Fn quantize = quant::quantize_acts16_fn(isa);
  thread_local std::vector<int16_t> qs;
  thread_local std::vector<float> ds;
  qs.resize(static_cast<size_t>(m * k));
  ds.resize(static_cast<size_t>(m * quant::acts16_groups(k)));
  int16_t* q = qs.data();
  float* d = ds.data();
  quant::run_on(pool, m, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      quantize(x + i * ldx, k, q + i * k, d + i * quant::acts16_groups(k));
  });
  return {&qs, &ds, k};
}

void dot_rows(const Acts16& acts, quant::Dot16Fn dot, int64_t i_begin, int64_t i_end, const uint8_t* w, int64_t j0,
              int64_t j1, const float* bias, float* y, int64_t ldy) {
  quant::tile_dot_rows<kMTile, quant::kActs16Rows>(acts, dot, i_begin, i_end, w, dtype_nbytes(DType::Q8_0, acts.k), j0,
                                                   j1, bias, y, ldy);
}

// Row handles for the tiled kernel (q8_0_tiled.h), which takes activation rows by the tile.
std::vector<quant::ActRow16> row_handles(const Acts16& acts, int64_t m) {
  std::vector<quant::ActRow16> rows(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) rows[static_cast<size_t>(i)] = acts.row(i);
  return rows;
}

bool use_tiled(int64_t rows, quant::Isa isa) {
  return isa != quant::Isa::Scalar && rows >= quant::kQ8TiledMinRows && quant::q8_0_tiled_available(isa);
}

}  // namespace

void q8_0_gemm_acts16(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, const float* bias,
                      float* y, int64_t ldy, ThreadPool* pool, quant::Isa isa) {
  const Acts16 acts = quantize_rows(x, m, k, ldx, pool, isa);
  if (use_tiled(m, isa)) {  // prefill: the pool splits panels of weight rows
    const std::vector<quant::ActRow16> rows = row_handles(acts, m);
    const int64_t panels = (n + quant::kQ8TilePanel - 1) / quant::kQ8TilePanel;
    quant::run_on(pool, panels, 1, [&](int64_t p0, int64_t p1) {
      quant::q8_0_tiled_gemm(rows.data(), m, k, w, p0 * quant::kQ8TilePanel, std::min(n, p1 * quant::kQ8TilePanel),
                             bias, y, ldy, isa);
    });
    return;
  }
  const quant::Dot16Fn dot = quant::dot_q8_0_acts16_fn(isa);
  const auto* wb = static_cast<const uint8_t*>(w);
  quant::run_on(pool, n, 8, [&](int64_t j0, int64_t j1) { dot_rows(acts, dot, 0, m, wb, j0, j1, bias, y, ldy); });
}

void q8_0_gemm_acts16_grouped(const float* x, int64_t m, int64_t k, int64_t ldx, const GemmGroup* groups,
                              int64_t num_groups, int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  const quant::Isa isa = quant::best_isa();
  const Acts16 acts = quantize_rows(x, m, k, ldx, pool, isa);
  const quant::Dot16Fn dot = quant::dot_q8_0_acts16_fn(isa);
  const std::vector<quant::ActRow16> rows = row_handles(acts, m);
  parallel_for_groups(
      pool, num_groups, n,
      [&](int64_t g, int64_t j0, int64_t j1) {
        const GemmGroup& gr = groups[g];
        if (use_tiled(gr.rows, isa)) {
          quant::q8_0_tiled_gemm(rows.data() + gr.first, gr.rows, k, gr.w, j0, j1, nullptr, y + gr.first * ldy, ldy,
                                 isa);
        } else {
          dot_rows(acts, dot, gr.first, gr.first + gr.rows, static_cast<const uint8_t*>(gr.w), j0, j1, nullptr, y, ldy);
        }
      },
      8);
}

}  // namespace cypris
