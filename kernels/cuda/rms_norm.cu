// RMSNorm on activations of any float type (F32/F16/BF16; fp32 arithmetic, fp32 weight): one
// thread block per row. A row of up to kPerThread * 1024 elements is read once into registers
// (eight-wide 16-byte loads when the row allows), reduced (sum of squares, block reduction),
// scaled and written; wider rows take a two-pass loop. The fused variant adds the residual first
// and stores the rounded sum back as the new residual (vLLM's fused_add_rms_norm), so the norm
// sees exactly the residual the next layer adds to.
#include "kernels/cuda/rms_norm.h"

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kPerThread = 16;  // elements held in registers per thread (two 8-wide chunks)
constexpr int kChunks = kPerThread / 8;

// x (and residual when ADD) [rows, hidden] of T; out [rows, hidden] (may alias x when ADD).
// VEC: hidden % 8 == 0, 16-byte aligned rows, hidden <= kPerThread * blockDim.x.
template <typename T, bool ADD, bool VEC>
static __global__ void rms_norm_kernel(const T* x, T* residual, const float* __restrict__ w, float eps,
                                       int64_t hidden, T* out) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * hidden;
  T* rr = ADD ? residual + row * hidden : nullptr;
  T* o = out + row * hidden;
  float ss = 0.0f;
  if constexpr (VEC) {
    float v[kChunks][8];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t i = (static_cast<int64_t>(c) * blockDim.x + threadIdx.x) * 8;
      if (i < hidden) {
        load8(xr + i, v[c]);
        if constexpr (ADD) {
          float r[8];
          load8(rr + i, r);
#pragma unroll
          for (int j = 0; j < 8; ++j) v[c][j] = to_float(from_float<T>(v[c][j] + r[j]));
          store8(rr + i, v[c]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) ss += v[c][j] * v[c][j];
      }
    }
    ss = block_sum(ss, scratch);
    const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t i = (static_cast<int64_t>(c) * blockDim.x + threadIdx.x) * 8;
      if (i < hidden) {
        float wv[8];
        load8(w + i, wv);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[c][j] = wv[j] * (v[c][j] * inv);
        store8(o + i, v[c]);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      float r = to_float(xr[i]);
      if constexpr (ADD) {
        const T rt = from_float<T>(r + to_float(rr[i]));
        rr[i] = rt;
        r = to_float(rt);
      }
      ss += r * r;
    }
    ss = block_sum(ss, scratch);
    const float inv = rsqrtf(ss / static_cast<float>(hidden) + eps);
    // Each thread re-reads only the elements it wrote itself, so no barrier is needed here.
    const T* src = ADD ? rr : xr;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = from_float<T>(w[i] * (to_float(src[i]) * inv));
  }
}

// One warp per head: head_dim is at most a few hundred, so a warp reduction is enough. RMSNorm with
// one weight for every head (w_head_stride 0), or (CENTRE) LayerNorm without bias with a weight row
// per head, two passes (mean, then the centred variance) as transformers computes it.
template <typename T, bool CENTRE>
static __global__ void norm_heads_kernel(T* __restrict__ x, int64_t ld, int64_t rows, int heads, int head_dim,
                                         const float* __restrict__ w, int64_t w_head_stride, float eps) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= rows * heads) return;
  const int h = static_cast<int>(warp % heads);
  T* hr = x + (warp / heads) * ld + static_cast<int64_t>(h) * head_dim;
  const float* wh = w + h * w_head_stride;
  float mean = 0.0f;
  if constexpr (CENTRE) {
    float sum = 0.0f;
    for (int i = lane; i < head_dim; i += 32) sum += to_float(hr[i]);
    mean = warp_sum(sum) / static_cast<float>(head_dim);
  }
  float ss = 0.0f;
  for (int i = lane; i < head_dim; i += 32) {
    const float c = to_float(hr[i]) - mean;
    ss += c * c;
  }
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(head_dim) + eps);
  for (int i = lane; i < head_dim; i += 32) hr[i] = from_float<T>(wh[i] * ((to_float(hr[i]) - mean) * inv));
}

template <bool CENTRE>
void launch_norm_heads(void* x, DType dtype, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight,
                       int64_t w_head_stride, float eps, cudaStream_t stream, const char* what) {
  CYPRIS_CHECK(rows >= 0 && heads > 0 && head_dim > 0 && ld >= int64_t{heads} * head_dim,
               "{}: rows {} heads {} head_dim {} ld {}", what, rows, heads, head_dim, ld);
  if (rows == 0) return;
  constexpr int kThreads = 256;  // 8 heads per block
  const int64_t warps = rows * heads;
  const unsigned blocks = static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads);
  dispatch_float(dtype, what, [&](auto tag) {
    using T = decltype(tag);
    norm_heads_kernel<T, CENTRE><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(x), ld, rows, heads, head_dim,
                                                                 weight, w_head_stride, eps);
  });
  CUDA_CHECK(cudaGetLastError());
}

template <bool ADD>
void launch_rms_norm(const void* x, void* residual, DType dtype, const float* w, float eps, int64_t rows,
                     int64_t hidden, void* out, cudaStream_t stream, const char* what) {
  CYPRIS_CHECK(rows >= 0 && hidden > 0, "{}: rows {} hidden {}", what, rows, hidden);
  if (rows == 0) return;
  const bool vec = vec8_ok(x, hidden, hidden) && vec8_ok(out, hidden, hidden) && vec8_ok(w, hidden, hidden) &&
                   (!ADD || vec8_ok(residual, hidden, hidden)) && hidden <= int64_t{kPerThread} * 1024;
  int threads = 32;
  if (vec) {
    while (threads < 1024 && int64_t{threads} * 8 < hidden) threads *= 2;  // one 8-wide chunk per thread if it can
  } else {
    while (threads < 1024 && int64_t{threads} * 4 < hidden) threads *= 2;
  }
  const unsigned grid = static_cast<unsigned>(rows);
  dispatch_float(dtype, what, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* rt = static_cast<T*>(residual);
    T* ot = static_cast<T*>(out);
    if (vec) {
      rms_norm_kernel<T, ADD, true><<<grid, threads, 0, stream>>>(xt, rt, w, eps, hidden, ot);
    } else {
      rms_norm_kernel<T, ADD, false><<<grid, threads, 0, stream>>>(xt, rt, w, eps, hidden, ot);
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rms_norm_cuda(const void* x, DType dtype, const float* weight, float eps, int64_t rows, int64_t hidden, void* out,
                   cudaStream_t stream) {
  launch_rms_norm<false>(x, nullptr, dtype, weight, eps, rows, hidden, out, stream, "rms_norm_cuda");
}

void fused_add_rms_norm_cuda(void* x, void* residual, DType dtype, const float* weight, float eps, int64_t rows,
                             int64_t hidden, cudaStream_t stream) {
  launch_rms_norm<true>(x, residual, dtype, weight, eps, rows, hidden, x, stream, "fused_add_rms_norm_cuda");
}

void rms_norm_heads_cuda(void* x, DType dtype, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight,
                         float eps, cudaStream_t stream) {
  launch_norm_heads<false>(x, dtype, ld, rows, heads, head_dim, weight, 0, eps, stream, "rms_norm_heads_cuda");
}

void layer_norm_heads_cuda(void* x, DType dtype, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight,
                           float eps, cudaStream_t stream) {
  launch_norm_heads<true>(x, dtype, ld, rows, heads, head_dim, weight, head_dim, eps, stream, "layer_norm_heads_cuda");
}

}  // namespace cypris
