#include "kernels/cpu/lora.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  // 16 independent partial sums, so the compiler vectorises without reassociating.
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

// shrunk[j] = scale * (a[j] · x), j < r (one clone per instruction set, picked at load time).
__attribute__((target_clones("avx512f", "avx2", "default"))) void shrink(const float* a, const float* x, int64_t r,
                                                                        int64_t k, float scale, float* shrunk) {
  for (int64_t j = 0; j < r; ++j) shrunk[j] = scale * dot(a + j * k, x, k);
}

// o[c] += b[c] · shrunk for c in [c0, c1).
__attribute__((target_clones("avx512f", "avx2", "default"))) void expand(const float* b, const float* shrunk,
                                                                        int64_t r, int64_t c0, int64_t c1, float* o) {
  for (int64_t c = c0; c < c1; ++c) o[c] += dot(b + c * r, shrunk, r);
}

}  // namespace

void lora_bgmv_f32(const float* x, int64_t ldx, const int32_t* slots, int64_t t, const float* a, const float* b,
                   const float* scales, int64_t r, int64_t k, int64_t n, float* out, int64_t ldo, ThreadPool* pool) {
  if (t <= 0 || n <= 0 || r <= 0) return;
  // One work item per (row, column chunk). With fewer rows than threads the columns are split so
  // that every thread has work; each item then repeats its row's shrink (r x k, small next to the
  // expand's n x r).
  const int threads = pool ? pool->size() : 1;
  int64_t chunks = 1;
  if (t < 2 * threads) chunks = std::min<int64_t>((2 * threads + t - 1) / t, std::max<int64_t>(1, n / 64));
  const int64_t chunk_n = (n + chunks - 1) / chunks;
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> shrunk(static_cast<size_t>(r));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / chunks;
      const int32_t s = slots[row];
      if (s < 0) continue;
      const float scale = scales[s];
      if (scale == 0.0f) continue;
      const float* xr = x + row * ldx;
      const float* as = a + static_cast<int64_t>(s) * r * k;
      const float* bs = b + static_cast<int64_t>(s) * n * r;
      shrink(as, xr, r, k, scale, shrunk.data());
      const int64_t c0 = (item % chunks) * chunk_n;
      expand(bs, shrunk.data(), r, c0, std::min(n, c0 + chunk_n), out + row * ldo);
    }
  };
  const int64_t items = t * chunks;
  if (pool && items > 1) {
    pool->parallel_for(items, run);
  } else {
    run(0, items);
  }
}

}  // namespace cypris
