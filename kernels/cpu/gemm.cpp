#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/common/error.h"
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
int64_t tile_rows(int64_t k) {
  int64_t rows = (64 * 1024) / std::max<int64_t>(1, k);  // ~256 KiB of fp32 per tile
  return std::clamp<int64_t>(rows, 8, 256);
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

void gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
              const float* bias, float* y, int64_t ldy, ThreadPool* pool) {
  CYPRIS_CHECK(w_dtype == DType::F32 || w_dtype == DType::F16 || w_dtype == DType::BF16,
               "gemm: weight dtype {} is not supported (F32, F16, BF16)", dtype_name(w_dtype));
  if (m == 0 || n == 0) return;
  init_blas_single_threaded();
  const int64_t rows = tile_rows(k);
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

}  // namespace cypris
