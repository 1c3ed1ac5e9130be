// Element-wise kernels: a grid-stride loop over the flattened tensor, one element per thread per
// iteration. These are memory-bound and tiny next to the GEMMs; fusing SiLU-and-mul into the
// down-projection's input conversion is a later optimisation.
#include "kernels/cuda/activation.h"

#include <algorithm>

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) { return std::min<unsigned>(ceil_div(n, kThreads), 65535u * 8u); }

static __global__ void silu_and_mul_kernel(const float* __restrict__ x, int64_t num_tokens, int64_t inter,
                                           float* __restrict__ out) {
  const int64_t n = num_tokens * inter;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / inter;
    const int64_t i = idx % inter;
    const float g = x[t * 2 * inter + i];
    const float u = x[t * 2 * inter + inter + i];
    out[idx] = g / (1.0f + expf(-g)) * u;
  }
}

static __global__ void gelu_tanh_and_mul_kernel(const float* __restrict__ x, int64_t num_tokens, int64_t inter,
                                                float* __restrict__ out) {
  const int64_t n = num_tokens * inter;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / inter;
    const int64_t i = idx % inter;
    const float g = x[t * 2 * inter + i];
    const float u = x[t * 2 * inter + inter + i];
    out[idx] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
  }
}

static __global__ void scale_and_cap_kernel(float* __restrict__ x, int64_t rows, int64_t cols, int64_t ld, float scale,
                                            float cap) {
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float* e = x + (idx / cols) * ld + idx % cols;
    *e = cap > 0.0f ? cap * tanhf(*e * scale / cap) : *e * scale;
  }
}

static __global__ void add_bias_kernel(float* __restrict__ y, int64_t rows, int64_t cols, int64_t ldy,
                                       const float* __restrict__ bias) {
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols;
    const int64_t c = idx % cols;
    y[r * ldy + c] += bias[c];
  }
}

template <typename T>
static __global__ void from_f32_kernel(const float* __restrict__ src, int64_t rows, int64_t cols, int64_t ld_src,
                                       T* __restrict__ dst) {
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols;
    const int64_t c = idx % cols;
    dst[idx] = from_float<T>(src[r * ld_src + c]);
  }
}

template <typename T>
static __global__ void to_f32_kernel(const T* __restrict__ src, int64_t n, float* __restrict__ dst) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[idx] = to_float(src[idx]);
  }
}

}  // namespace

void silu_and_mul_cuda(const float* x, int64_t num_tokens, int64_t inter, float* out, cudaStream_t stream) {
  CYPRIS_CHECK(num_tokens >= 0 && inter > 0, "silu_and_mul_cuda: tokens {} inter {}", num_tokens, inter);
  if (num_tokens == 0) return;
  silu_and_mul_kernel<<<grid_for(num_tokens * inter), kThreads, 0, stream>>>(x, num_tokens, inter, out);
  CUDA_CHECK(cudaGetLastError());
}

void gelu_tanh_and_mul_cuda(const float* x, int64_t num_tokens, int64_t inter, float* out, cudaStream_t stream) {
  CYPRIS_CHECK(num_tokens >= 0 && inter > 0, "gelu_tanh_and_mul_cuda: tokens {} inter {}", num_tokens, inter);
  if (num_tokens == 0) return;
  gelu_tanh_and_mul_kernel<<<grid_for(num_tokens * inter), kThreads, 0, stream>>>(x, num_tokens, inter, out);
  CUDA_CHECK(cudaGetLastError());
}

void scale_and_cap_cuda(float* x, int64_t rows, int64_t cols, int64_t ld, float scale, float cap,
                        cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && cols >= 0 && ld >= cols, "scale_and_cap_cuda: rows {} cols {} ld {}", rows, cols, ld);
  if (rows == 0 || cols == 0) return;
  scale_and_cap_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(x, rows, cols, ld, scale, cap);
  CUDA_CHECK(cudaGetLastError());
}

void add_bias_cuda(float* y, int64_t rows, int64_t cols, int64_t ldy, const float* bias, cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && cols > 0 && ldy >= cols, "add_bias_cuda: rows {} cols {} ldy {}", rows, cols, ldy);
  if (rows == 0) return;
  add_bias_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(y, rows, cols, ldy, bias);
  CUDA_CHECK(cudaGetLastError());
}

void convert_from_f32_cuda(const float* src, int64_t rows, int64_t cols, int64_t ld_src, DType dtype, void* dst,
                           cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && cols > 0 && ld_src >= cols, "convert_from_f32_cuda: rows {} cols {} ld {}", rows, cols,
               ld_src);
  if (rows == 0) return;
  const unsigned grid = grid_for(rows * cols);
  switch (dtype) {
    case DType::F32:
      from_f32_kernel<<<grid, kThreads, 0, stream>>>(src, rows, cols, ld_src, static_cast<float*>(dst));
      break;
    case DType::F16:
      from_f32_kernel<<<grid, kThreads, 0, stream>>>(src, rows, cols, ld_src, static_cast<__half*>(dst));
      break;
    case DType::BF16:
      from_f32_kernel<<<grid, kThreads, 0, stream>>>(src, rows, cols, ld_src, static_cast<__nv_bfloat16*>(dst));
      break;
    default:
      CYPRIS_FAIL("convert_from_f32_cuda: dtype {} is not supported", dtype_name(dtype));
  }
  CUDA_CHECK(cudaGetLastError());
}

void convert_to_f32_cuda(const void* src, DType dtype, int64_t count, float* dst, cudaStream_t stream) {
  if (count <= 0) return;
  const unsigned grid = grid_for(count);
  switch (dtype) {
    case DType::F32:
      to_f32_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(src), count, dst);
      break;
    case DType::F16:
      to_f32_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(src), count, dst);
      break;
    case DType::BF16:
      to_f32_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), count, dst);
      break;
    default:
      CYPRIS_FAIL("convert_to_f32_cuda: dtype {} is not supported", dtype_name(dtype));
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
