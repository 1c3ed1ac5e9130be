// LoRA's grouped product (BGMV, as Punica's and S-LoRA's decode kernels): a block per (row, chunk
// of 256 output columns). The block reads its row's slot on the device (so a CUDA graph replays
// whatever slots the step copied in), computes the row's shrink x·Aᵀ (r values, one warp per
// rank entry, lanes striding k) into shared memory scaled by the adapter's scale, then each thread
// adds one output column's expand. Every block of a row repeats the shrink: r x k next to the
// block's 256 x r expand, cheap at decode. Rows of the base model (slot < 0) return at once.
//
// Prefill (many rows, in runs of one adapter: a sequence's tokens are contiguous) takes the segmented
// GEMM instead (SGMV, as Punica's prefill kernels): two launches per projection, a shrink over tiles
// of 16 rows, tmp[16, r] = scale·X·A_sᵀ with A_s streamed through shared memory in chunks of 32
// inputs, then an expand over tiles of 16 rows x 64 columns, out += tmp·B_sᵀ. Each tile reads the
// slots of its rows on the device and runs once per distinct adapter among them (once inside a
// sequence, twice where two sequences meet), so the shrink is computed once per row instead of once
// per 256 output columns, and A and B are read once per 16 rows instead of once per row.
#include "kernels/cuda/lora.h"

#include <algorithm>

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;
constexpr int kMaxRank = 256;

template <typename T>
static __global__ void lora_bgmv_kernel(const T* __restrict__ x, int64_t ldx, const int32_t* __restrict__ slots,
                                        const T* __restrict__ a, const T* __restrict__ b,
                                        const float* __restrict__ scales, int r, int64_t k, int64_t n,
                                        T* __restrict__ out, int64_t ldo) {
  __shared__ float shrunk[kMaxRank];
  const int64_t row = blockIdx.x;
  const int s = slots[row];
  if (s < 0) return;
  const float scale = scales[s];
  if (scale == 0.0f) return;
  const T* xr = x + row * ldx;
  const T* as = a + static_cast<int64_t>(s) * r * k;
  const T* bs = b + static_cast<int64_t>(s) * n * r;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int j = warp; j < r; j += warps) {
    const T* aj = as + static_cast<int64_t>(j) * k;
    float acc = 0.0f;
    for (int64_t i = lane; i < k; i += 32) acc += to_float(aj[i]) * to_float(xr[i]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) shrunk[j] = acc * scale;
  }
  __syncthreads();
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const T* bc = bs + c * r;
  float acc = 0.0f;
  for (int j = 0; j < r; ++j) acc += to_float(bc[j]) * shrunk[j];
  T& o = out[row * ldo + c];
  o = from_float<T>(to_float(o) + acc);
}

constexpr int kTileRows = 16;    // rows per SGMV tile
constexpr int kShrinkK = 32;     // inputs per shared-memory chunk of the shrink
constexpr int kExpandCols = 64;  // output columns per expand tile
constexpr int kExpandR = 32;     // ranks per shared-memory chunk of the expand

// The slots of the tile's rows (rows past t: -1) into shared memory; returns the number of rows.
__device__ int load_tile_slots(const int32_t* __restrict__ slots, int64_t t, int64_t row0, int* tile_slots) {
  if (threadIdx.x < kTileRows) {
    const int64_t row = row0 + threadIdx.x;
    tile_slots[threadIdx.x] = row < t ? slots[row] : -1;
  }
  __syncthreads();
  return t - row0 < kTileRows ? static_cast<int>(t - row0) : kTileRows;
}

// The smallest slot above `after` among the tile's rows, -1 when none (every thread gets the same).
__device__ int next_tile_slot(const int* tile_slots, int after) {
  int best = -1;
  for (int i = 0; i < kTileRows; ++i) {
    const int s = tile_slots[i];
    if (s > after && (best < 0 || s < best)) best = s;
  }
  return best;
}

// tmp[row, j] = scale_s · Σ_i x[row, i] · a[s, j, i] for the rows of the tile with slot s >= 0.
template <typename T>
static __global__ void lora_sgmv_shrink_kernel(const T* __restrict__ x, int64_t ldx, const int32_t* __restrict__ slots,
                                               int64_t t, const T* __restrict__ a, const float* __restrict__ scales,
                                               int r, int64_t k, float* __restrict__ tmp) {
  __shared__ int tile_slots[kTileRows];
  __shared__ float xs[kTileRows][kShrinkK];
  __shared__ float as[kMaxRank][kShrinkK + 1];  // +1: no bank conflicts reading along the rank
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int rows = load_tile_slots(slots, t, row0, tile_slots);
  const int outputs = kTileRows * r;  // (row, rank) pairs, at most 16 per thread
  for (int s = next_tile_slot(tile_slots, -1); s >= 0; s = next_tile_slot(tile_slots, s)) {
    const float scale = scales[s];
    const T* asl = a + static_cast<int64_t>(s) * r * k;
    float acc[kTileRows * kMaxRank / kThreads];
#pragma unroll
    for (int p = 0; p < kTileRows * kMaxRank / kThreads; ++p) acc[p] = 0.0f;
    for (int64_t k0 = 0; k0 < k; k0 += kShrinkK) {
      for (int idx = threadIdx.x; idx < kTileRows * kShrinkK; idx += blockDim.x) {
        const int i = idx / kShrinkK, c = idx % kShrinkK;
        const int64_t col = k0 + c;
        xs[i][c] = (i < rows && tile_slots[i] == s && col < k) ? to_float(x[(row0 + i) * ldx + col]) : 0.0f;
      }
      for (int idx = threadIdx.x; idx < r * kShrinkK; idx += blockDim.x) {
        const int j = idx / kShrinkK, c = idx % kShrinkK;
        const int64_t col = k0 + c;
        as[j][c] = col < k ? to_float(asl[static_cast<int64_t>(j) * k + col]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int p = 0; p < kTileRows * kMaxRank / kThreads; ++p) {
        const int idx = static_cast<int>(threadIdx.x) + p * kThreads;
        if (idx < outputs) {
          const int i = idx / r, j = idx % r;
          float sum = 0.0f;
#pragma unroll 8
          for (int c = 0; c < kShrinkK; ++c) sum += xs[i][c] * as[j][c];
          acc[p] += sum;
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int p = 0; p < kTileRows * kMaxRank / kThreads; ++p) {
      const int idx = static_cast<int>(threadIdx.x) + p * kThreads;
      if (idx < outputs) {
        const int i = idx / r, j = idx % r;
        if (i < rows && tile_slots[i] == s) tmp[(row0 + i) * r + j] = acc[p] * scale;
      }
    }
  }
}

// out[row, c] += Σ_j tmp[row, j] · b[s, c, j] for the rows of the tile with slot s >= 0 and scale != 0.
template <typename T>
static __global__ void lora_sgmv_expand_kernel(const float* __restrict__ tmp, const int32_t* __restrict__ slots,
                                               int64_t t, const T* __restrict__ b, const float* __restrict__ scales,
                                               int r, int64_t n, T* __restrict__ out, int64_t ldo) {
  __shared__ int tile_slots[kTileRows];
  __shared__ float ts[kTileRows][kExpandR];
  __shared__ float bs[kExpandCols][kExpandR + 1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kExpandCols;
  const int rows = load_tile_slots(slots, t, row0, tile_slots);
  constexpr int kPer = kTileRows * kExpandCols / kThreads;  // 4 outputs per thread
  for (int s = next_tile_slot(tile_slots, -1); s >= 0; s = next_tile_slot(tile_slots, s)) {
    if (scales[s] == 0.0f) continue;  // an emptied slot: rows as they were (the shrink wrote zeros)
    const T* bsl = b + static_cast<int64_t>(s) * n * r;
    float acc[kPer];
#pragma unroll
    for (int p = 0; p < kPer; ++p) acc[p] = 0.0f;
    for (int j0 = 0; j0 < r; j0 += kExpandR) {
      for (int idx = threadIdx.x; idx < kTileRows * kExpandR; idx += blockDim.x) {
        const int i = idx / kExpandR, j = j0 + idx % kExpandR;
        ts[i][idx % kExpandR] = (i < rows && tile_slots[i] == s && j < r) ? tmp[(row0 + i) * r + j] : 0.0f;
      }
      for (int idx = threadIdx.x; idx < kExpandCols * kExpandR; idx += blockDim.x) {
        const int c = idx / kExpandR, j = j0 + idx % kExpandR;
        const int64_t col = col0 + c;
        bs[c][idx % kExpandR] = (col < n && j < r) ? to_float(bsl[col * r + j]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int p = 0; p < kPer; ++p) {
        const int idx = static_cast<int>(threadIdx.x) + p * kThreads;
        const int i = idx / kExpandCols, c = idx % kExpandCols;
        float sum = 0.0f;
#pragma unroll 8
        for (int j = 0; j < kExpandR; ++j) sum += ts[i][j] * bs[c][j];
        acc[p] += sum;
      }
      __syncthreads();
    }
#pragma unroll
    for (int p = 0; p < kPer; ++p) {
      const int idx = static_cast<int>(threadIdx.x) + p * kThreads;
      const int i = idx / kExpandCols, c = idx % kExpandCols;
      const int64_t col = col0 + c;
      if (i < rows && tile_slots[i] == s && col < n) {
        T& o = out[(row0 + i) * ldo + col];
        o = from_float<T>(to_float(o) + acc[p]);
      }
    }
  }
}

}  // namespace

void lora_sgmv_cuda(const void* x, int64_t ldx, const int32_t* slots, int64_t t, const void* a, const void* b,
                    const float* scales, int64_t r, int64_t k, int64_t n, void* out, int64_t ldo, float* tmp,
                    DType dtype, cudaStream_t stream) {
  CYPRIS_CHECK(r >= 1 && r <= kMaxRank, "lora_sgmv_cuda: rank {} must be in [1, {}]", r, kMaxRank);
  const int64_t tiles = (t + kTileRows - 1) / kTileRows, col_tiles = (n + kExpandCols - 1) / kExpandCols;
  CYPRIS_CHECK(tiles <= 2147483647 && col_tiles <= 65535, "lora_sgmv_cuda: {} rows x {} columns is too large", t, n);
  if (t <= 0 || n <= 0) return;
  dispatch_float(dtype, "lora_sgmv_cuda", [&](auto tag) {
    using T = decltype(tag);
    lora_sgmv_shrink_kernel<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
        static_cast<const T*>(x), ldx, slots, t, static_cast<const T*>(a), scales, static_cast<int>(r), k, tmp);
    CUDA_CHECK(cudaGetLastError());
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(col_tiles));
    lora_sgmv_expand_kernel<T><<<grid, kThreads, 0, stream>>>(tmp, slots, t, static_cast<const T*>(b), scales,
                                                              static_cast<int>(r), n, static_cast<T*>(out), ldo);
  });
  CUDA_CHECK(cudaGetLastError());
}

void lora_bgmv_cuda(const void* x, int64_t ldx, const int32_t* slots, int64_t t, const void* a, const void* b,
                    const float* scales, int64_t r, int64_t k, int64_t n, void* out, int64_t ldo, DType dtype,
                    cudaStream_t stream) {
  CYPRIS_CHECK(r >= 1 && r <= kMaxRank, "lora_bgmv_cuda: rank {} must be in [1, {}]", r, kMaxRank);
  CYPRIS_CHECK(t <= 2147483647 && (n + kThreads - 1) / kThreads <= 65535, "lora_bgmv_cuda: {} rows x {} columns is too large", t, n);
  if (t <= 0 || n <= 0) return;
  const dim3 grid(static_cast<unsigned>(t), static_cast<unsigned>((n + kThreads - 1) / kThreads));
  dispatch_float(dtype, "lora_bgmv_cuda", [&](auto tag) {
    using T = decltype(tag);
    lora_bgmv_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), ldx, slots,
                                                       static_cast<const T*>(a), static_cast<const T*>(b), scales,
                                                       static_cast<int>(r), k, n, static_cast<T*>(out), ldo);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
