// RMSNorm: one thread block per row. The row is read once to reduce the sum of squares (fp32,
// block reduction) and once more to scale; a hidden size of a few thousand fp32 values stays in
// L1/L2 between the passes, so keeping it in registers is not worth a per-size template. The
// fused variant writes residual + x in the first pass, saving a separate add kernel and one
// round trip of the activations through memory.
#include "kernels/cuda/rms_norm.h"

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

static __global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, float eps,
                                       int64_t hidden, float* __restrict__ out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * hidden;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
  float* o = out + row * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = w[i] * (xr[i] * inv);
}

static __global__ void fused_add_rms_norm_kernel(float* __restrict__ x, float* __restrict__ residual,
                                                 const float* __restrict__ w, float eps, int64_t hidden) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  float* xr = x + row * hidden;
  float* rr = residual + row * hidden;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float r = rr[i] + xr[i];
    rr[i] = r;
    ss += r * r;
  }
  ss = block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
  // Each thread re-reads only the elements it wrote itself, so no barrier is needed here.
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) xr[i] = w[i] * (rr[i] * inv);
}

// One warp per head: head_dim is at most a few hundred, so a warp reduction is enough.
static __global__ void rms_norm_heads_kernel(float* __restrict__ x, int64_t ld, int64_t rows, int heads, int head_dim,
                                             const float* __restrict__ w, float eps) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= rows * heads) return;
  float* hr = x + (warp / heads) * ld + (warp % heads) * static_cast<int64_t>(head_dim);
  float ss = 0.0f;
  for (int i = lane; i < head_dim; i += 32) ss += hr[i] * hr[i];
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(head_dim) + eps);
  for (int i = lane; i < head_dim; i += 32) hr[i] = w[i] * (hr[i] * inv);
}

int threads_for(int64_t hidden) {
  int t = 32;
  while (t < 1024 && t * 4 < hidden) t *= 2;
  return t;
}

}  // namespace

void rms_norm_cuda(const float* x, const float* weight, float eps, int64_t rows, int64_t hidden, float* out,
                   cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && hidden > 0, "rms_norm_cuda: rows {} hidden {}", rows, hidden);
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), threads_for(hidden), 0, stream>>>(x, weight, eps, hidden, out);
  CUDA_CHECK(cudaGetLastError());
}

void fused_add_rms_norm_cuda(float* x, float* residual, const float* weight, float eps, int64_t rows, int64_t hidden,
                             cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && hidden > 0, "fused_add_rms_norm_cuda: rows {} hidden {}", rows, hidden);
  if (rows == 0) return;
  fused_add_rms_norm_kernel<<<static_cast<unsigned>(rows), threads_for(hidden), 0, stream>>>(x, residual, weight, eps,
                                                                                            hidden);
  CUDA_CHECK(cudaGetLastError());
}

void rms_norm_heads_cuda(float* x, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight, float eps,
                         cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && heads > 0 && head_dim > 0 && ld >= int64_t{heads} * head_dim,
               "rms_norm_heads_cuda: rows {} heads {} head_dim {} ld {}", rows, heads, head_dim, ld);
  if (rows == 0) return;
  constexpr int kThreads = 256;  // 8 heads per block
  const int64_t warps = rows * heads;
  const unsigned blocks = static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads);
  rms_norm_heads_kernel<<<blocks, kThreads, 0, stream>>>(x, ld, rows, heads, head_dim, weight, eps);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
