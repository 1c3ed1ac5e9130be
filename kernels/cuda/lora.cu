// LoRA's grouped product (BGMV, as Punica's and S-LoRA's decode kernels): a block per (row, chunk
// of 256 output columns). The block reads its row's slot on the device (so a CUDA graph replays
// whatever slots the step copied in), computes the row's shrink x·Aᵀ (r values, one warp per
// rank entry, lanes striding k) into shared memory scaled by the adapter's scale, then each thread
// adds one output column's expand. Every block of a row repeats the shrink: r x k next to the
// block's 256 x r expand, cheap at decode; prefill runs the same kernel (a segmented GEMM is the
// next step for long prompts). Rows of the base model (slot < 0) return at once.
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

}  // namespace

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
