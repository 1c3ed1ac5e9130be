#include "kernels/cpu/lora.h"

#include <algorithm>
#include <utility>
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
  // The rows grouped by adapter (the SGMV form), so that each adapter's A and B are read once per
  // group of rows instead of once per row: at decode, with 8 rows over 4 adapters, half the bytes.
  // Groups are cut at kGroupRows rows (a prefill's rows: many groups, every thread busy).
  constexpr int64_t kGroupRows = 64;
  std::vector<std::pair<int32_t, int64_t>> by_slot;  // (slot, row), rows of adapters with a scale
  by_slot.reserve(static_cast<size_t>(t));
  for (int64_t row = 0; row < t; ++row) {
    const int32_t s = slots[row];
    if (s >= 0 && scales[s] != 0.0f) by_slot.emplace_back(s, row);
  }
  if (by_slot.empty()) return;
  std::stable_sort(by_slot.begin(), by_slot.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) into by_slot, one slot each
  for (size_t i = 0; i < by_slot.size();) {
    size_t j = i;
    while (j < by_slot.size() && by_slot[j].first == by_slot[i].first && static_cast<int64_t>(j - i) < kGroupRows) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  // One work item per (group, column chunk), one pass over the pool. With fewer groups than threads
  // the columns are split so that every thread has work; each item then repeats its group's shrink
  // (rows x r x k, small next to the expand's rows x n x r).
  const int threads = pool ? pool->size() : 1;
  const int64_t num_groups = static_cast<int64_t>(groups.size());
  int64_t chunks = 1;
  if (num_groups < 2 * threads) {
    chunks = std::min<int64_t>((2 * threads + num_groups - 1) / num_groups, std::max<int64_t>(1, n / 64));
  }
  const int64_t chunk_n = (n + chunks - 1) / chunks;
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> shrunk;
    for (int64_t item = begin; item < end; ++item) {
      const auto [g0, g1] = groups[static_cast<size_t>(item / chunks)];
      const int32_t s = by_slot[g0].first;
      const int64_t m = static_cast<int64_t>(g1 - g0);
      const float scale = scales[s];
      const float* as = a + static_cast<int64_t>(s) * r * k;
      const float* bs = b + static_cast<int64_t>(s) * n * r;
      shrunk.resize(static_cast<size_t>(m * r));
      for (int64_t i = 0; i < m; ++i) {
        shrink(as, x + by_slot[g0 + static_cast<size_t>(i)].second * ldx, r, k, scale, shrunk.data() + i * r);
      }
      const int64_t c0 = (item % chunks) * chunk_n, c1 = std::min(n, c0 + chunk_n);
      // Column blocks: a block of B's rows is read once for all the group's rows (from cache after).
      constexpr int64_t kCols = 64;
      for (int64_t cb = c0; cb < c1; cb += kCols) {
        const int64_t ce = std::min(c1, cb + kCols);
        for (int64_t i = 0; i < m; ++i) {
          expand(bs, shrunk.data() + i * r, r, cb, ce, out + by_slot[g0 + static_cast<size_t>(i)].second * ldo);
        }
      }
    }
  };
  const int64_t items = num_groups * chunks;
  if (pool && items > 1) {
    pool->parallel_for(items, run);
  } else {
    run(0, items);
  }
}

}  // namespace cypris
