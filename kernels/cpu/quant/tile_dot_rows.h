// The m-tiled loop the quantized GEMMs share: y[i, j] = act row i · weight row j (+ bias[j]) for
// activation rows [i_begin, i_end) and weight rows [j0, j1). Each weight row is dotted with every
// activation row of the current m-tile while it is in L1, so the weights stream from memory once.
// The tile's row handles are set up before the weight loop: a decode-sized dot is a few hundred
// cycles, so nothing per weight row may cost more than a few (two integer divisions per row were
// ~10% of Q4_K_M decode).
// Also the fp32 activation rows and the pool dispatch those GEMMs share.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/cpu/thread_pool.h"

namespace cypris::quant {

// Rows of fp32 activations in the shape tile_dot_rows walks.
struct FloatActs {
  const float* x;
  int64_t k;
  int64_t ldx;
  const float* row(int64_t i) const { return x + i * ldx; }
};

// fn(0, n) on the calling thread without a pool, else split over the pool in chunks of min_chunk or
// more.
inline void run_on(ThreadPool* pool, int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool) {
    pool->parallel_for(n, fn, min_chunk);
  } else {
    fn(0, n);
  }
}

// Bytes of weights read ahead of the row being dotted: software prefetch streamed large weight
// matrices ~1.5x faster per CPU second than the hardware prefetcher alone on the 2-vCPU Sapphire
// Rapids machine of docs/perf (decode reads every weight once, so it is the memory stream).
constexpr size_t kWeightPrefetchBytes = 4096;

// Prefetches the cache lines of bytes [offset, offset + len) after base (an address past the end
// of the weights is harmless to prefetch; the sum is formed as an integer).
inline void prefetch_lines(const void* base, size_t offset, size_t len) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(base) + offset;
  for (uintptr_t a = p & ~uintptr_t{63}; a < p + len; a += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
}

// Acts: .k and .row(i) (a row handle); Dot: dot(weight_row, handles, nr, k, out) for nr <= kDotRows.
template <int64_t kMTile, int kDotRows, typename Acts, typename Dot>
void tile_dot_rows(const Acts& acts, Dot dot, int64_t i_begin, int64_t i_end, const uint8_t* w, size_t row_bytes,
                   int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy) {
  const int64_t k = acts.k;
  decltype(acts.row(0)) tile[kMTile];
  float out[kDotRows];
  for (int64_t i0 = i_begin; i0 < i_end; i0 += kMTile) {
    const int64_t rows = std::min(i_end - i0, kMTile);
    for (int64_t r = 0; r < rows; ++r) tile[r] = acts.row(i0 + r);
    for (int64_t j = j0; j < j1; ++j) {
      const void* wrow = w + j * row_bytes;
      // The row kWeightPrefetchBytes ahead, one row's worth of lines per row dotted.
      prefetch_lines(wrow, kWeightPrefetchBytes, row_bytes);
      const float b = bias ? bias[j] : 0.0f;
      float* yj = y + i0 * ldy + j;
      for (int64_t r = 0; r < rows; r += kDotRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kDotRows, rows - r));
        dot(wrow, tile + r, nr, k, out);
        for (int q = 0; q < nr; ++q) yj[(r + q) * ldy] = out[q] + b;
      }
    }
  }
}

}  // namespace cypris::quant
