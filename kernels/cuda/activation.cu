// Element-wise kernels on activations of any float type (F32/F16/BF16, fp32 arithmetic): a
// grid-stride loop over the flattened tensor, eight elements per thread per iteration (16-byte
// accesses for 16-bit types) when the rows allow it, else one.
#include "kernels/cuda/activation.h"

#include <algorithm>

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) { return std::max(1u, std::min<unsigned>(ceil_div(n, kThreads), 65535u * 8u)); }

struct Silu {
  __device__ float operator()(float g) const { return g / (1.0f + expf(-g)); }
};
struct GeluTanh {
  __device__ float operator()(float g) const {
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
  }
};

// out[t, i] = act(x[t, i]) * x[t, inter + i]; VEC: eight elements per step (inter % 8 == 0).
template <typename T, typename Act, bool VEC>
static __global__ void act_and_mul_kernel(const T* __restrict__ x, int64_t num_tokens, int64_t inter,
                                          T* __restrict__ out) {
  constexpr int W = VEC ? 8 : 1;
  const int64_t per_row = inter / W;
  const int64_t n = num_tokens * per_row;
  const Act act;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / per_row;
    const int64_t i = (idx % per_row) * W;
    const T* g = x + t * 2 * inter + i;
    if constexpr (VEC) {
      float gv[8], uv[8], o[8];
      load8(g, gv);
      load8(g + inter, uv);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = act(gv[j]) * uv[j];
      store8(out + t * inter + i, o);
    } else {
      out[t * inter + i] = from_float<T>(act(to_float(g[0])) * to_float(g[inter]));
    }
  }
}

template <typename T>
static __global__ void scale_and_cap_kernel(T* __restrict__ x, int64_t rows, int64_t cols, int64_t ld, float scale,
                                            float cap) {
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T* e = x + (idx / cols) * ld + idx % cols;
    const float v = to_float(*e);
    *e = from_float<T>(cap > 0.0f ? cap * tanhf(v * scale / cap) : v * scale);
  }
}

template <typename T>
static __global__ void add_rows_kernel(const T* __restrict__ x, int64_t ldx, T* __restrict__ out, int64_t ldo,
                                       int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols;
    const int64_t c = idx % cols;
    T& o = out[r * ldo + c];
    o = from_float<T>(to_float(o) + to_float(x[r * ldx + c]));
  }
}

template <typename T>
static __global__ void add_bias_kernel(T* __restrict__ y, int64_t rows, int64_t cols, int64_t ldy,
                                       const float* __restrict__ bias) {
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols;
    const int64_t c = idx % cols;
    y[r * ldy + c] = from_float<T>(to_float(y[r * ldy + c]) + bias[c]);
  }
}

template <typename S, typename D>
static __global__ void convert_kernel(const S* __restrict__ src, int64_t rows, int64_t cols, int64_t ld_src,
                                      D* __restrict__ dst, int64_t ld_dst) {
  const int64_t n = rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols;
    const int64_t c = idx % cols;
    dst[r * ld_dst + c] = from_float<D>(to_float(src[r * ld_src + c]));
  }
}

template <typename Act>
void launch_act_and_mul(const void* x, DType dtype, int64_t num_tokens, int64_t inter, void* out,
                        cudaStream_t stream, const char* what) {
  CYPRIS_CHECK(num_tokens >= 0 && inter > 0, "{}: tokens {} inter {}", what, num_tokens, inter);
  if (num_tokens == 0) return;
  dispatch_float(dtype, what, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* ot = static_cast<T*>(out);
    if (vec8_ok(x, inter, 2 * inter) && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
      act_and_mul_kernel<T, Act, true><<<grid_for(num_tokens * inter / 8), kThreads, 0, stream>>>(xt, num_tokens,
                                                                                                  inter, ot);
    } else {
      act_and_mul_kernel<T, Act, false><<<grid_for(num_tokens * inter), kThreads, 0, stream>>>(xt, num_tokens, inter,
                                                                                              ot);
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void silu_and_mul_cuda(const void* x, DType dtype, int64_t num_tokens, int64_t inter, void* out,
                       cudaStream_t stream) {
  launch_act_and_mul<Silu>(x, dtype, num_tokens, inter, out, stream, "silu_and_mul_cuda");
}

void gelu_tanh_and_mul_cuda(const void* x, DType dtype, int64_t num_tokens, int64_t inter, void* out,
                            cudaStream_t stream) {
  launch_act_and_mul<GeluTanh>(x, dtype, num_tokens, inter, out, stream, "gelu_tanh_and_mul_cuda");
}

void scale_and_cap_cuda(void* x, DType dtype, int64_t rows, int64_t cols, int64_t ld, float scale, float cap,
                        cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && cols >= 0 && ld >= cols, "scale_and_cap_cuda: rows {} cols {} ld {}", rows, cols, ld);
  if (rows == 0 || cols == 0) return;
  dispatch_float(dtype, "scale_and_cap_cuda", [&](auto tag) {
    using T = decltype(tag);
    scale_and_cap_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(static_cast<T*>(x), rows, cols, ld, scale,
                                                                        cap);
  });
  CUDA_CHECK(cudaGetLastError());
}

void add_rows_cuda(const void* x, int64_t ldx, void* out, int64_t ldo, DType dtype, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && cols >= 0 && ldx >= cols && ldo >= cols, "add_rows_cuda: rows {} cols {} ldx {} ldo {}",
               rows, cols, ldx, ldo);
  if (rows == 0 || cols == 0) return;
  dispatch_float(dtype, "add_rows_cuda", [&](auto tag) {
    using T = decltype(tag);
    add_rows_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(static_cast<const T*>(x), ldx, static_cast<T*>(out),
                                                                    ldo, rows, cols);
  });
  CUDA_CHECK(cudaGetLastError());
}

void add_bias_cuda(void* y, DType dtype, int64_t rows, int64_t cols, int64_t ldy, const float* bias,
                   cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && cols > 0 && ldy >= cols, "add_bias_cuda: rows {} cols {} ldy {}", rows, cols, ldy);
  if (rows == 0) return;
  dispatch_float(dtype, "add_bias_cuda", [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(static_cast<T*>(y), rows, cols, ldy, bias);
  });
  CUDA_CHECK(cudaGetLastError());
}

void convert_cuda(const void* src, DType src_dtype, int64_t rows, int64_t cols, int64_t ld_src, void* dst,
                  DType dst_dtype, int64_t ld_dst, cudaStream_t stream) {
  CYPRIS_CHECK(rows >= 0 && cols > 0 && ld_src >= cols && ld_dst >= cols,
               "convert_cuda: rows {} cols {} ld_src {} ld_dst {}", rows, cols, ld_src, ld_dst);
  if (rows == 0) return;
  const unsigned grid = grid_for(rows * cols);
  dispatch_float(src_dtype, "convert_cuda source", [&](auto stag) {
    using S = decltype(stag);
    dispatch_float(dst_dtype, "convert_cuda destination", [&](auto dtag) {
      using D = decltype(dtag);
      convert_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const S*>(src), rows, cols, ld_src,
                                                    static_cast<D*>(dst), ld_dst);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void convert_from_f32_cuda(const float* src, int64_t rows, int64_t cols, int64_t ld_src, DType dtype, void* dst,
                           cudaStream_t stream) {
  convert_cuda(src, DType::F32, rows, cols, ld_src, dst, dtype, cols, stream);
}

void convert_to_f32_cuda(const void* src, DType dtype, int64_t count, float* dst, cudaStream_t stream) {
  if (count <= 0) return;
  convert_cuda(src, dtype, 1, count, count, dst, DType::F32, count, stream);
}

}  // namespace cypris
