// Quantized linear and embedding (see quant_gemm.h).
//
// Work split: the activations are quantized once on the calling thread (they are small: m x k
// bytes), then the pool splits the weight rows. Each task walks its weight rows in order, so the
// quantized weights stream from memory exactly once; for each weight row every activation row of
// the current m-tile is dotted while the row sits in L1. m is tiled so the tile of quantized
// activations (kMTile x k bytes) stays in L2 for large prefill batches.
#include "kernels/cpu/quant/quant_gemm.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "engine/common/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/bnb_gemm.h"
#include "kernels/cpu/quant/fp8_gemm.h"
#include "kernels/cpu/quant/q4_0_gemv.h"
#include "kernels/cpu/quant/q4_0_tiled.h"
#include "kernels/cpu/quant/q6_k_tiled.h"
#include "kernels/cpu/quant/q8_0_acts16.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "kernels/cpu/quant/tile_dot_rows.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

constexpr int64_t kMTile = 32;

void check_weight(DType w_dtype, int64_t k) {
  CYPRIS_CHECK(quant::supported(w_dtype), "quantized linear: weight type {} is not a supported quantized type",
               dtype_name(w_dtype));
  const int be = quant::block_elems(w_dtype);
  CYPRIS_CHECK(k % be == 0, "quantized linear: row length {} is not a multiple of the {} block ({} values)", k,
               dtype_name(w_dtype), be);
}

void dequant_gemm(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
                  const float* bias, float* y, int64_t ldy, ThreadPool* pool) {
  // Tiles of 64 rows become fp32 and go through the fp32 GEMM one pool task each; the fp32 GEMM
  // itself runs without the pool here (nested parallel_for would run serially anyway).
  constexpr int64_t kRows = 64;
  const size_t row_bytes = dtype_nbytes(w_dtype, k);
  quant::run_on(pool, (n + kRows - 1) / kRows, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> tile(static_cast<size_t>(kRows * k));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * kRows, nb = std::min(kRows, n - n0);
      for (int64_t r = 0; r < nb; ++r) {
        quant::dequantize_row(w_dtype, static_cast<const uint8_t*>(w) + (n0 + r) * row_bytes, tile.data() + r * k, k);
      }
      std::vector<float> yt(static_cast<size_t>(m * nb));
      gemm_xwt(x, m, k, ldx, tile.data(), DType::F32, nb, bias ? bias + n0 : nullptr, yt.data(), nb, nullptr);
      for (int64_t i = 0; i < m; ++i) std::copy_n(yt.data() + i * nb, nb, y + i * ldy + n0);
    }
  });
}

// Activation rows quantized to 8 bits per block: [m, k] int8, [m, k / block] scales, [m, k / 16]
// group sums, in buffers reused across calls on this thread.
struct QuantizedActs {
  const int8_t* qs;
  const float* ds;
  const int16_t* bsums;
  int64_t k;
  int block;
  quant::ActRow row(int64_t i) const { return {qs + i * k, ds + i * (k / block), bsums + i * (k / 16)}; }
};

QuantizedActs quantize_acts(const float* x, int64_t m, int64_t k, int64_t ldx, DType w_dtype, quant::Isa isa,
                            ThreadPool* pool) {
  const quant::QuantizeFn quantize = quant::quantize_fn(isa);
  const int block = quant::act_block(w_dtype);
  thread_local std::vector<int8_t> qs;
  thread_local std::vector<float> ds;
  thread_local std::vector<int16_t> bsums;
  qs.resize(static_cast<size_t>(m * k));
  ds.resize(static_cast<size_t>(m * (k / block)));
  bsums.resize(static_cast<size_t>(m * (k / 16)));
  int8_t* qs_p = qs.data();
  float* ds_p = ds.data();
  int16_t* bs_p = bsums.data();
  quant::run_on(pool, m, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      quantize(x + i * ldx, k, block, qs_p + i * k, ds_p + i * (k / block), bs_p + i * (k / 16));
    }
  });
  return {qs_p, ds_p, bs_p, k, block};
}

void dot_rows(const QuantizedActs& acts, quant::DotFn dot, int64_t i_begin, int64_t i_end, const uint8_t* w,
              DType w_dtype, int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy) {
  quant::tile_dot_rows<kMTile, quant::kMaxDotRows>(acts, dot, i_begin, i_end, w, dtype_nbytes(w_dtype, acts.k), j0, j1,
                                                   bias, y, ldy);
}

// Prefill with Q4_0 or Q6_K weights on AVX-512 VNNI: the tiled GEMMs (q4_0_tiled.h, q6_k_tiled.h).
bool use_tiled(DType w_dtype, int64_t rows, quant::Isa isa) {
  if (isa == quant::Isa::Scalar) return false;
  if (w_dtype == DType::Q4_0) return rows >= quant::kQ4TiledMinRows && quant::q4_0_tiled_available(isa);
  if (w_dtype == DType::Q6_K) return rows >= quant::kQ6TiledMinRows && quant::q6_k_tiled_available(isa);
  return false;
}
static_assert(quant::kQ4TilePanel == quant::kQ6TilePanel);
constexpr int64_t kTilePanel = quant::kQ4TilePanel;

void tiled_gemm(DType w_dtype, const quant::ActRow* rows, int64_t num_rows, int64_t k, const void* w, int64_t j0,
                int64_t j1, const float* bias, float* y, int64_t ldy, quant::Isa isa) {
  if (w_dtype == DType::Q6_K) {
    quant::q6_k_tiled_gemm(rows, num_rows, k, w, j0, j1, bias, y, ldy, isa);
  } else {
    quant::q4_0_tiled_gemm(rows, num_rows, k, w, j0, j1, bias, y, ldy, isa);
  }
}

// Decode with Q4_0 weights on AVX-512 VNNI: four weight rows per pass (q4_0_gemv.h).
bool use_gemv(DType w_dtype, int64_t rows, quant::Isa isa) {
  return w_dtype == DType::Q4_0 && rows <= quant::kQ4GemvMaxRows && quant::q4_0_gemv_available(isa);
}

std::vector<quant::ActRow> row_handles(const QuantizedActs& acts, int64_t m) {
  std::vector<quant::ActRow> rows(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) rows[static_cast<size_t>(i)] = acts.row(i);
  return rows;
}

}  // namespace

void quant_gemm_xwt(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
                    const float* bias, float* y, int64_t ldy, ThreadPool* pool, QuantPath path) {
  check_weight(w_dtype, k);
  if (m == 0 || n == 0) return;
  if (path == QuantPath::DequantGemm) {
    dequant_gemm(x, m, k, ldx, w, w_dtype, n, bias, y, ldy, pool);
    return;
  }
  quant::Isa isa = quant::best_isa();
  if (path == QuantPath::Int8Scalar) isa = quant::Isa::Scalar;
  if (path == QuantPath::Int8Avx2) isa = quant::Isa::Avx2;
  if (path == QuantPath::Int8Avx512) isa = quant::Isa::Avx512;
  CYPRIS_CHECK(quant::isa_available(isa), "quantized linear: this CPU has no {}", quant::isa_name(isa));
  if (w_dtype == DType::Q8_0) {  // 16-bit activations for 8-bit weights (q8_0_acts16.h)
    q8_0_gemm_acts16(x, m, k, ldx, w, n, bias, y, ldy, pool, isa);
    return;
  }
  if (w_dtype == DType::F8G128) {  // fp8 weights: fp32 activations, dequantized in the dot (fp8_gemm.h)
    f8_gemm_xwt(x, m, k, ldx, w, n, bias, y, ldy, pool, isa);
    return;
  }
  if (quant::is_b4(w_dtype)) {  // bitsandbytes NF4/FP4: fp32 activations, table lookup in the dot (bnb_gemm.h)
    b4_gemm_xwt(x, m, k, ldx, w, w_dtype, n, bias, y, ldy, pool, isa);
    return;
  }
  const QuantizedActs acts = quantize_acts(x, m, k, ldx, w_dtype, isa, pool);
  if (use_tiled(w_dtype, m, isa)) {  // the pool splits panels of weight rows
    const std::vector<quant::ActRow> rows = row_handles(acts, m);
    const int64_t panels = (n + kTilePanel - 1) / kTilePanel;
    quant::run_on(pool, panels, 1, [&](int64_t p0, int64_t p1) {
      tiled_gemm(w_dtype, rows.data(), m, k, w, p0 * kTilePanel, std::min(n, p1 * kTilePanel), bias, y, ldy, isa);
    });
    return;
  }
  if (use_gemv(w_dtype, m, isa)) {  // the pool splits weight rows, in fours
    const std::vector<quant::ActRow> rows = row_handles(acts, m);
    quant::run_on(pool, n, 16, [&](int64_t j0, int64_t j1) {
      quant::q4_0_gemv(rows.data(), m, k, w, j0, j1, bias, y, ldy, isa);
    });
    return;
  }
  const quant::DotFn dot = quant::dot_fn(w_dtype, isa);
  const auto* wb = static_cast<const uint8_t*>(w);
  quant::run_on(pool, n, 8,
                [&](int64_t j0, int64_t j1) { dot_rows(acts, dot, 0, m, wb, w_dtype, j0, j1, bias, y, ldy); });
}

void quant_gemm_xwt_grouped(const float* x, int64_t k, int64_t ldx, const GemmGroup* groups, int64_t num_groups,
                            DType w_dtype, int64_t n, float* y, int64_t ldy, ThreadPool* pool) {
  check_weight(w_dtype, k);
  std::vector<GemmGroup> live;
  int64_t m = 0;  // rows [0, m) cover every group
  for (int64_t g = 0; g < num_groups; ++g) {
    if (groups[g].rows <= 0) continue;
    live.push_back(groups[g]);
    m = std::max(m, groups[g].first + groups[g].rows);
  }
  if (live.empty() || n == 0) return;
  if (w_dtype == DType::F8G128) {
    f8_gemm_xwt_grouped(x, k, ldx, live.data(), static_cast<int64_t>(live.size()), n, y, ldy, pool);
    return;
  }
  if (quant::is_b4(w_dtype)) {
    b4_gemm_xwt_grouped(x, k, ldx, live.data(), static_cast<int64_t>(live.size()), w_dtype, n, y, ldy, pool);
    return;
  }
  if (w_dtype == DType::Q8_0) {
    q8_0_gemm_acts16_grouped(x, m, k, ldx, live.data(), static_cast<int64_t>(live.size()), n, y, ldy, pool);
    return;
  }
  const quant::Isa isa = quant::best_isa();
  const QuantizedActs acts = quantize_acts(x, m, k, ldx, w_dtype, isa, pool);
  const quant::DotFn dot = quant::dot_fn(w_dtype, isa);
  const std::vector<quant::ActRow> rows = row_handles(acts, m);
  parallel_for_groups(
      pool, static_cast<int64_t>(live.size()), n,
      [&](int64_t g, int64_t j0, int64_t j1) {
        const GemmGroup& gr = live[static_cast<size_t>(g)];
        if (use_tiled(w_dtype, gr.rows, isa)) {
          tiled_gemm(w_dtype, rows.data() + gr.first, gr.rows, k, gr.w, j0, j1, nullptr, y + gr.first * ldy, ldy, isa);
          return;
        }
        if (use_gemv(w_dtype, gr.rows, isa)) {
          quant::q4_0_gemv(rows.data() + gr.first, gr.rows, k, gr.w, j0, j1, nullptr, y + gr.first * ldy, ldy, isa);
          return;
        }
        dot_rows(acts, dot, gr.first, gr.first + gr.rows, static_cast<const uint8_t*>(gr.w), w_dtype, j0, j1, nullptr,
                 y, ldy);
      },
      8);
}

void quant_embedding(const int32_t* ids, int64_t num_tokens, const void* table, DType dtype, int64_t hidden, float* out,
                     ThreadPool* pool) {
  check_weight(dtype, hidden);
  const size_t row_bytes = dtype_nbytes(dtype, hidden);
  quant::run_on(pool, num_tokens, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      quant::dequantize_row(dtype, static_cast<const uint8_t*>(table) + static_cast<int64_t>(ids[t]) * row_bytes,
                            out + t * hidden, hidden);
    }
  });
}

}  // namespace cypris
