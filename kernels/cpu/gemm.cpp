#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers build reductions from _mm256_undefined_*(), which trips
// -W(maybe-)uninitialized in every caller; the values are never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

#include "engine/common/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < count; ++i) dst[i] = f16_to_f32(src[i]);
}

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}

template <DType DT>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const void* base, int64_t i) {
  if constexpr (DT == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  } else if constexpr (DT == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float load1(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::F32:
      return static_cast<const float*>(base)[i];
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  }
}

// Decode-sized products (m <= kMaxGemvRows): each weight row is converted in registers and dotted
// with every x row while it is in L1, so the weights stream from memory once, with no fp32 copy.
constexpr int64_t kMaxGemvRows = 4;

template <DType DT>
__attribute__((target("avx2,fma,f16c"))) void gemv_rows(const float* x, int64_t m, int64_t k, int64_t ldx,
                                                        const void* w, int64_t n0, int64_t n1, const float* bias,
                                                        float* y, int64_t ldy) {
  const size_t es = DT == DType::F32 ? 4 : 2;
  const int64_t k16 = k / 16 * 16;
  for (int64_t j = n0; j < n1; ++j) {
    const void* row = static_cast<const char*>(w) + j * k * es;
    __m256 a0[kMaxGemvRows], a1[kMaxGemvRows];
    for (int64_t i = 0; i < m; ++i) a0[i] = a1[i] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < k16; kk += 16) {
      const __m256 w0 = load8<DT>(row, kk);
      const __m256 w1 = load8<DT>(row, kk + 8);
      for (int64_t i = 0; i < m; ++i) {
        a0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + kk), a0[i]);
        a1[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i * ldx + kk + 8), a1[i]);
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      float s = hsum(_mm256_add_ps(a0[i], a1[i]));
      for (int64_t kk = k16; kk < k; ++kk) s += load1(row, DT, kk) * x[i * ldx + kk];
      y[i * ldy + j] = bias ? s + bias[j] : s;
    }
  }
}

// AVX-512 variant of gemv_rows: 32 weights per step (two zmm), up to kMaxGemvRows512 activation
// rows. BF16 weights are widened exactly (a shift) and use fp32 FMAs: AVX512_BF16's vdpbf16ps would
// need the activations rounded to bf16 too (about 3 significant digits), and a decode-sized
// product is bound by reading the weights, not by the multiplies, so the exact path costs nothing.
// The rows of a task are consecutive in memory, so the kernel prefetches the weights kGemvPrefetch
// bytes ahead of the line it reads, across row ends: on the 2-vCPU Sapphire Rapids machine of
// docs/perf this read a large F16 matrix ~1.5x faster per CPU second than the hardware prefetcher
// alone (4 KiB ahead; 2 and 8 KiB were no better).
constexpr int64_t kMaxGemvRows512 = 8;
constexpr int64_t kGemvPrefetch = 4096;

template <DType DT>
__attribute__((target("avx512f,avx512bw,avx512dq,avx2,fma,f16c"))) void gemv_rows_avx512(
    const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n0, int64_t n1, const float* bias,
    float* y, int64_t ldy) {
  const size_t es = DT == DType::F32 ? 4 : 2;
  const int64_t k32 = k / 32 * 32;
  for (int64_t j = n0; j < n1; ++j) {
    const void* row = static_cast<const char*>(w) + j * k * es;
    __m512 a0[kMaxGemvRows512], a1[kMaxGemvRows512];
    for (int64_t i = 0; i < m; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < k32; kk += 32) {
      const char* ahead = static_cast<const char*>(row) + kk * es + kGemvPrefetch;
      _mm_prefetch(ahead, _MM_HINT_T0);
      if constexpr (DT == DType::F32) _mm_prefetch(ahead + 64, _MM_HINT_T0);
      const __m512 w0 = simd::load16<DT>(row, kk);
      const __m512 w1 = simd::load16<DT>(row, kk + 16);
      for (int64_t i = 0; i < m; ++i) {
        a0[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i * ldx + kk), a0[i]);
        a1[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i * ldx + kk + 16), a1[i]);
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      float s = _mm512_reduce_add_ps(_mm512_add_ps(a0[i], a1[i]));
      for (int64_t kk = k32; kk < k; ++kk) s += load1(row, DT, kk) * x[i * ldx + kk];
      y[i * ldy + j] = bias ? s + bias[j] : s;
    }
  }
}

// Prefill-sized products of 16-bit weights without converting or packing them: register tiles of
// 6 activation rows x 4 weight rows (24 zmm accumulators) in dot-product form, the weights widened
// in registers, over k in blocks of kGemmKc and rows in panels of kGemmMc so the activation panel
// stays in L2; the four sums of an activation row are reduced together. Results accumulate in y
// across k blocks.
constexpr int kGemmMr = 6, kGemmNr = 4;
constexpr int64_t kGemmKc = 512;
constexpr int64_t kGemmMc = 192;  // activation rows per panel: 192 x 512 fp32 = 384 KiB, within L2

// The four horizontal sums of a, b, c, d.
CYPRIS_TARGET_AVX512 inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a0 b0 a1 b1 per lane
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));  // a b c d
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

template <DType DT, int MR, int NR>
CYPRIS_TARGET_AVX512 void gemm_tile(const float* x, int64_t ldx, const char* w, size_t w_row_bytes, int64_t klen,
                                    float* y, int64_t ldy, bool accumulate, const float* bias) {
  __m512 acc[MR][kGemmNr];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < kGemmNr; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t k16 = klen / 16 * 16;
  for (int64_t kk = 0; kk < k16; kk += 16) {
    __m512 xv[MR];
    for (int r = 0; r < MR; ++r) xv[r] = _mm512_loadu_ps(x + r * ldx + kk);
    for (int c = 0; c < NR; ++c) {
      const __m512 wv = simd::load16<DT>(w + c * w_row_bytes, kk);
      for (int r = 0; r < MR; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, reduce4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    for (int c = 0; c < NR; ++c) {
      float s = sums[c];
      for (int64_t kk = k16; kk < klen; ++kk) s += x[r * ldx + kk] * load1(w + c * w_row_bytes, DT, kk);
      float& out = y[r * ldy + c];
      out = (accumulate ? out : (bias ? bias[c] : 0.0f)) + s;
    }
  }
}

template <DType DT, int MR>
CYPRIS_TARGET_AVX512 void gemm_tile_nr(int nr, const float* x, int64_t ldx, const char* w, size_t w_row_bytes,
                                       int64_t klen, float* y, int64_t ldy, bool accumulate, const float* bias) {
  switch (nr) {
    case 4: return gemm_tile<DT, MR, 4>(x, ldx, w, w_row_bytes, klen, y, ldy, accumulate, bias);
    case 3: return gemm_tile<DT, MR, 3>(x, ldx, w, w_row_bytes, klen, y, ldy, accumulate, bias);
    case 2: return gemm_tile<DT, MR, 2>(x, ldx, w, w_row_bytes, klen, y, ldy, accumulate, bias);
    default: return gemm_tile<DT, MR, 1>(x, ldx, w, w_row_bytes, klen, y, ldy, accumulate, bias);
  }
}

// y[:, n0:n1) of x [m, k] . W^T for 16-bit W. The kGemmNr weight rows of a k block are widened to
// fp32 once (8 KiB, in L1) and every 6-row tile of the activation panel reads them from there: a
// widening in the tile costs two uops on the FMA ports per 16 weights, once per tile, and took a
// quarter of those ports' time.
template <DType DT>
CYPRIS_TARGET_AVX512 void gemm_rows_avx512(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w,
                                           int64_t n0, int64_t n1, const float* bias, float* y, int64_t ldy) {
  const size_t row_bytes = static_cast<size_t>(k) * 2;
  alignas(64) float wf[kGemmNr * kGemmKc];  // [kGemmNr, kGemmKc] fp32
  constexpr size_t wf_row_bytes = kGemmKc * sizeof(float);
  const char* wfc = reinterpret_cast<const char*>(wf);
  for (int64_t k0 = 0; k0 < k; k0 += kGemmKc) {
    const int64_t klen = std::min(kGemmKc, k - k0);
    const int64_t k16 = klen / 16 * 16;
    const bool accumulate = k0 > 0;
    for (int64_t i0 = 0; i0 < m; i0 += kGemmMc) {
      const int64_t i1 = std::min(m, i0 + kGemmMc);
      for (int64_t j = n0; j < n1; j += kGemmNr) {
        const int nr = static_cast<int>(std::min<int64_t>(kGemmNr, n1 - j));
        const char* wj = static_cast<const char*>(w) + j * row_bytes + k0 * 2;
        for (int c = 0; c < nr; ++c) {
          const char* src = wj + c * row_bytes;
          float* dst = wf + c * kGemmKc;
          for (int64_t kk = 0; kk < k16; kk += 16) _mm512_store_ps(dst + kk, simd::load16<DT>(src, kk));
          for (int64_t kk = k16; kk < klen; ++kk) dst[kk] = load1(src, DT, kk);
        }
        const float* bj = bias ? bias + j : nullptr;
        for (int64_t i = i0; i < i1; i += kGemmMr) {
          const float* xi = x + i * ldx + k0;
          float* yi = y + i * ldy + j;
          constexpr DType F = DType::F32;
          switch (std::min<int64_t>(kGemmMr, i1 - i)) {
            case 6: gemm_tile_nr<F, 6>(nr, xi, ldx, wfc, wf_row_bytes, klen, yi, ldy, accumulate, bj); break;
            case 5: gemm_tile_nr<F, 5>(nr, xi, ldx, wfc, wf_row_bytes, klen, yi, ldy, accumulate, bj); break;
            case 4: gemm_tile_nr<F, 4>(nr, xi, ldx, wfc, wf_row_bytes, klen, yi, ldy, accumulate, bj); break;
            case 3: gemm_tile_nr<F, 3>(nr, xi, ldx, wfc, wf_row_bytes, klen, yi, ldy, accumulate, bj); break;
            case 2: gemm_tile_nr<F, 2>(nr, xi, ldx, wfc, wf_row_bytes, klen, yi, ldy, accumulate, bj); break;
            default: gemm_tile_nr<F, 1>(nr, xi, ldx, wfc, wf_row_bytes, klen, yi, ldy, accumulate, bj); break;
          }
        }
      }
    }
  }
}
#endif

// Scalar fallback: a table of all 65536 halves beats the bit-twiddling conversion.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = f16_to_f32(static_cast<uint16_t>(i));
    return t;
  }();
  return table.data();
}

// Rows of W converted per tile: 32 rows of a 4096-wide matrix is 512 KiB of fp32, near L2 size.
// Weight rows per sgemm call: tiles of up to ~768 KiB of fp32 (OpenBLAS packs x again for every
// call, so fewer, larger calls pack less), their count a multiple of the threads so each thread
// gets the same share.
int64_t tile_rows(int64_t n, int64_t k, int threads) {
  const int64_t max_rows = std::clamp<int64_t>((192 * 1024) / std::max<int64_t>(1, k), 8, 512);
  int64_t tiles = (n + max_rows - 1) / max_rows;
  tiles = (tiles + threads - 1) / threads * threads;
  const int64_t rows = (n + tiles - 1) / tiles;
  return std::max<int64_t>(8, (rows + 15) / 16 * 16);
}

}  // namespace

void init_blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void convert_to_f32(const void* src, DType dtype, float* dst, int64_t count) {
  switch (dtype) {
    case DType::F32:
      std::copy_n(static_cast<const float*>(src), count, dst);
      return;
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      uint32_t* d = reinterpret_cast<uint32_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
      return;
    }
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
#if defined(__x86_64__)
      if (cpu_has_f16c()) {
        f16_to_f32_f16c(s, dst, count);
        return;
      }
#endif
      const float* t = f16_table();
      for (int64_t i = 0; i < count; ++i) dst[i] = t[s[i]];
      return;
    }
    default:
      CYPRIS_FAIL("convert_to_f32: unsupported dtype {}", dtype_name(dtype));
  }
}

void convert_from_f32(const float* src, DType dtype, void* dst, int64_t count) {
  switch (dtype) {
    case DType::F32:
      std::copy_n(src, count, static_cast<float*>(dst));
      return;
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      CYPRIS_FAIL("convert_from_f32: unsupported dtype {}", dtype_name(dtype));
  }
}

// Calls kernel(DType constant) with the compile-time DType of w_dtype (F32, F16 or BF16).
template <typename Kernel>
static void with_weight_dtype(DType w_dtype, Kernel kernel) {
  switch (w_dtype) {
    case DType::F32:
      kernel(std::integral_constant<DType, DType::F32>{});
      break;
    case DType::F16:
      kernel(std::integral_constant<DType, DType::F16>{});
      break;
    default:
      kernel(std::integral_constant<DType, DType::BF16>{});
      break;
  }
}

// Runs kernel(DType constant, j0, j1) over weight rows [0, n), split over the pool, with the
// compile-time DType of w_dtype (F32, F16 or BF16).
template <typename Kernel>
static void for_weight_rows(DType w_dtype, int64_t n, ThreadPool* pool, Kernel kernel) {
  auto rows_fn = [&](int64_t j0, int64_t j1) { with_weight_dtype(w_dtype, [&](auto dt) { kernel(dt, j0, j1); }); };
  if (pool) {
    pool->parallel_for(n, rows_fn, 16);
  } else {
    rows_fn(0, n);
  }
}

static void check_gemm_weight(DType w_dtype) {
  CYPRIS_CHECK(w_dtype == DType::F32 || w_dtype == DType::F16 || w_dtype == DType::BF16,
               "gemm: weight dtype {} is not supported (F32, F16, BF16)", dtype_name(w_dtype));
}

void gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
              const float* bias, float* y, int64_t ldy, ThreadPool* pool) {
  check_gemm_weight(w_dtype);
  if (m == 0 || n == 0) return;
#if defined(__x86_64__)
  if (m <= kMaxGemvRows512 && simd::has_avx512()) {
    for_weight_rows(w_dtype, n, pool, [&](auto dt, int64_t j0, int64_t j1) {
      gemv_rows_avx512<decltype(dt)::value>(x, m, k, ldx, w, j0, j1, bias, y, ldy);
    });
    return;
  }
  if (w_dtype != DType::F32 && simd::has_avx512()) {
    for_weight_rows(w_dtype, n, pool, [&](auto dt, int64_t j0, int64_t j1) {
      constexpr DType DT = decltype(dt)::value;
      if constexpr (DT != DType::F32) gemm_rows_avx512<DT>(x, m, k, ldx, w, j0, j1, bias, y, ldy);
    });
    return;
  }
  if (m <= kMaxGemvRows && simd::has_avx2_fma()) {
    for_weight_rows(w_dtype, n, pool, [&](auto dt, int64_t j0, int64_t j1) {
      gemv_rows<decltype(dt)::value>(x, m, k, ldx, w, j0, j1, bias, y, ldy);
    });
    return;
  }
#endif
  init_blas_single_threaded();
  const int64_t rows = tile_rows(n, k, pool ? pool->size() : 1);
  const int64_t num_tiles = (n + rows - 1) / rows;
  const size_t esize = dtype_size(w_dtype);
  auto run = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> scratch;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * rows;
      const int64_t nb = std::min(rows, n - n0);
      const float* wt;
      if (w_dtype == DType::F32) {
        wt = static_cast<const float*>(w) + n0 * k;
      } else {
        scratch.resize(static_cast<size_t>(rows * k));
        convert_to_f32(static_cast<const char*>(w) + n0 * k * esize, w_dtype, scratch.data(), nb * k);
        wt = scratch.data();
      }
      float* yt = y + n0;
      float beta = 0.0f;
      if (bias) {
        for (int64_t i = 0; i < m; ++i) std::copy_n(bias + n0, nb, yt + i * ldy);
        beta = 1.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(nb),
                  static_cast<int>(k), 1.0f, x, static_cast<int>(ldx), wt, static_cast<int>(k), beta, yt,
                  static_cast<int>(ldy));
    }
  };
  if (pool) {
    pool->parallel_for(num_tiles, run);
  } else {
    run(0, num_tiles);
  }
}

void gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups,
                      DType w_dtype, int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  check_gemm_weight(w_dtype);
  if (n == 0) return;
  // Decode-sized groups go through the GEMV kernels in one pass over the pool; larger ones are
  // compute-bound products of their own.
  int64_t gemv_rows_max = 0;
#if defined(__x86_64__)
  const bool avx512 = simd::has_avx512();
  gemv_rows_max = avx512 ? kMaxGemvRows512 : simd::has_avx2_fma() ? kMaxGemvRows : 0;
#endif
  std::vector<GemmGroup> small;
  small.reserve(static_cast<size_t>(num_groups));
  for (int64_t g = 0; g < num_groups; ++g) {
    const GemmGroup& gr = groups[g];
    if (gr.rows <= 0) continue;
    if (gr.rows <= gemv_rows_max) {
      small.push_back(gr);
    } else {
      gemm_xwt(x + gr.first * ldx, gr.rows, k, ldx, gr.w, w_dtype, n, nullptr, y + gr.first * ldy, ldy, pool);
    }
  }
#if defined(__x86_64__)
  parallel_for_groups(
      pool, static_cast<int64_t>(small.size()), n,
      [&](int64_t g, int64_t j0, int64_t j1) {
        const GemmGroup& gr = small[static_cast<size_t>(g)];
        with_weight_dtype(w_dtype, [&](auto dt) {
          constexpr DType DT = decltype(dt)::value;
          if (avx512) {
            gemv_rows_avx512<DT>(x + gr.first * ldx, gr.rows, k, ldx, gr.w, j0, j1, nullptr, y + gr.first * ldy, ldy);
          } else {
            gemv_rows<DT>(x + gr.first * ldx, gr.rows, k, ldx, gr.w, j0, j1, nullptr, y + gr.first * ldy, ldy);
          }
        });
      },
      16);
#endif
}

}  // namespace cypris
