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

template <typename T>
static __global__ void embedding_kernel(const int32_t* __restrict__ ids, const T* __restrict__ table, int64_t vocab,
                                        int64_t hidden, float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float* o = out + t * hidden;
  if (id < 0 || id >= vocab) {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = 0.0f;
    return;
  }
  const T* row = table + static_cast<int64_t>(id) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = to_float(row[i]);
}

static __global__ void gather_rows_kernel(const float* __restrict__ x, int64_t num_rows_x, int64_t hidden,
                                          const int32_t* __restrict__ indices, float* __restrict__ out) {
  const int64_t r = blockIdx.x;
  const int32_t src = indices[r];
  float* o = out + r * hidden;
  const bool ok = src >= 0 && src < num_rows_x;
  const float* row = x + static_cast<int64_t>(ok ? src : 0) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = ok ? row[i] : 0.0f;
}

}  // namespace

void embedding_cuda(const int32_t* ids, int64_t num_tokens, const void* table, DType table_dtype, int64_t vocab,
                    int64_t hidden, float* out, cudaStream_t stream) {
  CYPRIS_CHECK(hidden > 0 && vocab > 0, "embedding_cuda: vocab {} hidden {}", vocab, hidden);
  if (num_tokens <= 0) return;
  const unsigned grid = static_cast<unsigned>(num_tokens);
  const int threads = 256;
  switch (table_dtype) {
    case DType::F32:
      embedding_kernel<<<grid, threads, 0, stream>>>(ids, static_cast<const float*>(table), vocab, hidden, out);
      break;
    case DType::F16:
      embedding_kernel<<<grid, threads, 0, stream>>>(ids, static_cast<const __half*>(table), vocab, hidden, out);
      break;
    case DType::BF16:
      embedding_kernel<<<grid, threads, 0, stream>>>(ids, static_cast<const __nv_bfloat16*>(table), vocab, hidden,
                                                     out);
      break;
    default:
      CYPRIS_FAIL("embedding_cuda: table dtype {} is not supported (float32, float16, bfloat16)",
                  dtype_name(table_dtype));
  }
  CUDA_CHECK(cudaGetLastError());
}

static __global__ void scatter_add_rows_kernel(const float* __restrict__ src, int64_t hidden,
                                               const int32_t* __restrict__ indices, const float* __restrict__ weights,
                                               float* __restrict__ out, int64_t rows_out) {
  const int64_t r = blockIdx.x;
  const int32_t row = indices[r];
  if (row < 0 || row >= rows_out) return;
  const float w = weights[r];
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[row * hidden + i] += w * src[r * hidden + i];
}

void scatter_add_rows_cuda(const float* src, int64_t count, int64_t hidden, const int32_t* indices,
                           const float* weights, float* out, int64_t rows_out, cudaStream_t stream) {
  CYPRIS_CHECK(hidden > 0 && rows_out >= 0, "scatter_add_rows_cuda: hidden {} rows {}", hidden, rows_out);
  if (count <= 0) return;
  scatter_add_rows_kernel<<<static_cast<unsigned>(count), 256, 0, stream>>>(src, hidden, indices, weights, out,
                                                                            rows_out);
  CUDA_CHECK(cudaGetLastError());
}

void gather_rows_cuda(const float* x, int64_t num_rows_x, int64_t hidden, const int32_t* indices, int64_t count,
                      float* out, cudaStream_t stream) {
  CYPRIS_CHECK(hidden > 0, "gather_rows_cuda: hidden {}", hidden);
  if (count <= 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(count), 256, 0, stream>>>(x, num_rows_x, hidden, indices, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
