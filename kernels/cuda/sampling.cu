// Row argmax: one thread block per row, each thread scanning a strided share of the vocabulary
// (coalesced), then a shared-memory tree reduction over (value, index) pairs that prefers the
// lower index on ties, so the result equals std::max_element on the host.
#include "kernels/cuda/sampling.h"

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool better(float v, int32_t i, float bv, int32_t bi) {
  return v > bv || (v == bv && i < bi);
}

static __global__ void argmax_kernel(const float* __restrict__ logits, int64_t vocab, int64_t ld,
                                     int32_t* __restrict__ out) {
  __shared__ float vals[kThreads];
  __shared__ int32_t idxs[kThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (!isnan(v) && better(v, static_cast<int32_t>(i), bv, bi)) {
      bv = v;
      bi = static_cast<int32_t>(i);
    }
  }
  vals[threadIdx.x] = bv;
  idxs[threadIdx.x] = bi;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && better(vals[threadIdx.x + s], idxs[threadIdx.x + s], vals[threadIdx.x], idxs[threadIdx.x])) {
      vals[threadIdx.x] = vals[threadIdx.x + s];
      idxs[threadIdx.x] = idxs[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = idxs[0] == INT32_MAX ? 0 : idxs[0];
}

}  // namespace

void argmax_rows_cuda(const float* logits, int64_t rows, int64_t vocab, int64_t ld, int32_t* out,
                      cudaStream_t stream) {
  CYPRIS_CHECK(vocab > 0 && vocab <= INT32_MAX && ld >= vocab, "argmax_rows_cuda: vocab {} ld {}", vocab, ld);
  if (rows <= 0) return;
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, ld, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
