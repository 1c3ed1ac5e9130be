// Embedding and row gather: one thread block per output row, threads striding over the hidden
// dimension so that each warp reads a contiguous, coalesced piece of the source row. The table
// stays in its storage dtype (16-bit tables are converted while copying, never expanded in memory).
#include "kernels/cuda/embedding.h"

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

template <typename W, typename T>
static __global__ void embedding_kernel(const int32_t* __restrict__ ids, const W* __restrict__ table, int64_t vocab,
                                        int64_t hidden, T* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  T* o = out + t * hidden;
  if (id < 0 || id >= vocab) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = from_float<T>(0.0f);
    return;
  }
  const W* row = table + static_cast<int64_t>(id) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = from_float<T>(to_float(row[i]));
}

// Rows are copied as 4-byte words when they allow (any element type), else as bytes.
template <typename U>
static __global__ void gather_rows_kernel(const U* __restrict__ x, int64_t num_rows_x, int64_t row_units,
                                          const int32_t* __restrict__ indices, U* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const int32_t src = indices[r];
  U* o = out + r * row_units;
  const bool ok = src >= 0 && src < num_rows_x;
  const U* row = x + static_cast<int64_t>(ok ? src : 0) * row_units;
  for (int64_t i = threadIdx.x; i < row_units; i += blockDim.x) o[i] = ok ? row[i] : U{0};
}

template <typename T>
static __global__ void scatter_add_rows_kernel(const T* __restrict__ src, int64_t hidden,
                                               const int32_t* __restrict__ indices, const float* __restrict__ weights,
                                               T* __restrict__ out, int64_t rows_out) {
  const int64_t r = blockIdx.x;
  const int32_t row = indices[r];
  if (row < 0 || row >= rows_out) return;
  const float w = weights[r];
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    T& o = out[row * hidden + i];
    o = from_float<T>(to_float(o) + w * to_float(src[r * hidden + i]));
  }
}

}  // namespace

void embedding_cuda(const int32_t* ids, int64_t num_tokens, const void* table, DType table_dtype, int64_t vocab,
                    int64_t hidden, void* out, DType out_dtype, cudaStream_t stream) {
  CYPRIS_CHECK(hidden > 0 && vocab > 0, "embedding_cuda: vocab {} hidden {}", vocab, hidden);
  if (num_tokens <= 0) return;
  const unsigned grid = static_cast<unsigned>(num_tokens);
  const int threads = 256;
  dispatch_float(table_dtype, "embedding_cuda table", [&](auto wtag) {
    using W = decltype(wtag);
    dispatch_float(out_dtype, "embedding_cuda output", [&](auto otag) {
      using T = decltype(otag);
      embedding_kernel<<<grid, threads, 0, stream>>>(ids, static_cast<const W*>(table), vocab, hidden,
                                                     static_cast<T*>(out));
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void scatter_add_rows_cuda(const void* src, DType dtype, int64_t count, int64_t hidden, const int32_t* indices,
                           const float* weights, void* out, int64_t rows_out, cudaStream_t stream) {
  CYPRIS_CHECK(hidden > 0 && rows_out >= 0, "scatter_add_rows_cuda: hidden {} rows {}", hidden, rows_out);
  if (count <= 0) return;
  dispatch_float(dtype, "scatter_add_rows_cuda", [&](auto tag) {
    using T = decltype(tag);
    scatter_add_rows_kernel<<<static_cast<unsigned>(count), 256, 0, stream>>>(
        static_cast<const T*>(src), hidden, indices, weights, static_cast<T*>(out), rows_out);
  });
  CUDA_CHECK(cudaGetLastError());
}

void gather_rows_cuda(const void* x, size_t elem_bytes, int64_t num_rows_x, int64_t hidden, const int32_t* indices,
                      int64_t count, void* out, cudaStream_t stream) {
  CYPRIS_CHECK(hidden > 0 && elem_bytes > 0, "gather_rows_cuda: hidden {}", hidden);
  if (count <= 0) return;
  const int64_t row_bytes = hidden * static_cast<int64_t>(elem_bytes);
  const unsigned grid = static_cast<unsigned>(count);
  if (row_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0) {
    gather_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const uint32_t*>(x), num_rows_x, row_bytes / 4, indices,
                                                 static_cast<uint32_t*>(out));
  } else {
    gather_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const uint8_t*>(x), num_rows_x, row_bytes, indices,
                                                 static_cast<uint8_t*>(out));
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
