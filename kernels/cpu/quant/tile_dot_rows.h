// The m-tiled loop the quantized GEMMs share: y[i, j] = act row i · weight row j (+ bias[j]) for
// activation rows [i_begin, i_end) and weight rows [j0, j1). Each weight row is dotted with every
// activation row of the current m-tile while it is in L1, so the weights stream from memory once.
// The tile's row handles are set up before the weight loop: a decode-sized dot is a few hundred
// cycles, so nothing per weight row may cost more than a few (two integer divisions per row were
// ~10% of Q4_K_M decode).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cypris::quant {

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
