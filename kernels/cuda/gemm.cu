// Linear layers. Decode multiplies a handful of rows by the whole weight matrix, so its speed is
// the weight bandwidth: the GEMV kernel gives each output column one warp, which reads the
// column's weight row with 16-byte loads (8 bf16/fp16 or 4 fp32 per lane), converts to fp32 in
// registers and multiplies it with all m input rows at once, so every weight byte crosses the bus
// once per step. The m rows' partial sums live in registers (template bound MAXM, indexed only by
// unrolled loops). Prefill is compute-bound and goes to cuBLAS: cublasGemmEx with 16-bit inputs
// and fp32 compute for 16-bit weights (activations rounded to the weight dtype into scratch), or
// fp32 SGEMM (no TF32) for fp32 weights and for GemmPrecision::Fp32.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kGemvThreads = 256;  // 8 warps = 8 output columns per block
constexpr size_t kFp32TileBytes = size_t{64} << 20;

#define CUBLAS_CHECK(expr)                                                                                  \
  do {                                                                                                      \
    const cublasStatus_t st_ = (expr);                                                                      \
    CYPRIS_CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLAS error: {} in {} ({}:{}): {}", #expr, __func__, __FILE__, \
                 __LINE__, cublasGetStatusString(st_));                                                     \
  } while (0)

template <typename T>
__device__ __forceinline__ void load_vec(const T* p, float* out);

template <>
__device__ __forceinline__ void load_vec<float>(const float* p, float* out) {
  const float4 v = __ldg(reinterpret_cast<const float4*>(p));
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}

template <>
__device__ __forceinline__ void load_vec<__half>(const __half* p, float* out) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

template <>
__device__ __forceinline__ void load_vec<__nv_bfloat16>(const __nv_bfloat16* p, float* out) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

template <typename T, int MAXM, bool VEC>
static __global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const float* __restrict__ x, int m, int64_t k,
                                                                  int64_t ldx, const T* __restrict__ w, int64_t n,
                                                                  const float* __restrict__ bias,
                                                                  float* __restrict__ y, int64_t ldy) {
  const int lane = threadIdx.x & 31;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (kGemvThreads / 32) + (threadIdx.x >> 5);
  if (col >= n) return;
  const T* wr = w + col * k;
  float acc[MAXM];
#pragma unroll
  for (int r = 0; r < MAXM; ++r) acc[r] = 0.0f;
  if constexpr (VEC) {
    constexpr int V = 16 / sizeof(T);
#pragma unroll 2
    for (int64_t i = static_cast<int64_t>(lane) * V; i < k; i += 32 * V) {
      float wf[V];
      load_vec<T>(wr + i, wf);
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) {
          const float* xr = x + r * ldx + i;
#pragma unroll
          for (int v = 0; v < V; v += 4) {
            const float4 xv = *reinterpret_cast<const float4*>(xr + v);
            acc[r] += wf[v] * xv.x + wf[v + 1] * xv.y + wf[v + 2] * xv.z + wf[v + 3] * xv.w;
          }
        }
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += 32) {
      const float wv = to_float(wr[i]);
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) acc[r] += wv * x[r * ldx + i];
      }
    }
  }
  const float b = bias ? bias[col] : 0.0f;
#pragma unroll
  for (int r = 0; r < MAXM; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < m) y[r * ldy + col] = s + b;
  }
}

template <typename T, bool VEC>
void launch_gemv_rows(const float* x, int m, int64_t k, int64_t ldx, const T* w, int64_t n, const float* bias,
                      float* y, int64_t ldy, cudaStream_t stream) {
  const unsigned grid = ceil_div(n, kGemvThreads / 32);
  if (m <= 1) {
    gemv_kernel<T, 1, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  } else if (m <= 2) {
    gemv_kernel<T, 2, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  } else if (m <= 4) {
    gemv_kernel<T, 4, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  } else {
    gemv_kernel<T, 8, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  }
}

template <typename T>
void launch_gemv(const float* x, int m, int64_t k, int64_t ldx, const void* w, int64_t n, const float* bias, float* y,
                 int64_t ldy, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const bool vec = k % V == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const T* wt = static_cast<const T*>(w);
  if (vec) {
    launch_gemv_rows<T, true>(x, m, k, ldx, wt, n, bias, y, ldy, stream);
  } else {
    launch_gemv_rows<T, false>(x, m, k, ldx, wt, n, bias, y, ldy, stream);
  }
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F16:
      return CUDA_R_16F;
    case DType::BF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

void check_weight_dtype(DType t) {
  CYPRIS_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
               "linear on the GPU: weight dtype {} is not supported (float32, float16, bfloat16)", dtype_name(t));
}

int64_t fp32_tile_rows(int64_t k, int64_t n) {
  return std::max<int64_t>(1, std::min<int64_t>(n, static_cast<int64_t>(kFp32TileBytes / (sizeof(float) * k))));
}

}  // namespace

void gemv_xwt_cuda(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n,
                   const float* bias, float* y, int64_t ldy, cudaStream_t stream) {
  check_weight_dtype(w_dtype);
  CYPRIS_CHECK(m >= 0 && m <= kGemvMaxRows && k > 0 && n > 0 && ldx >= k && ldy >= n,
               "gemv_xwt_cuda: m {} (at most {}) k {} n {} ldx {} ldy {}", m, kGemvMaxRows, k, n, ldx, ldy);
  if (m == 0) return;
  const int mi = static_cast<int>(m);
  switch (w_dtype) {
    case DType::F32:
      launch_gemv<float>(x, mi, k, ldx, w, n, bias, y, ldy, stream);
      break;
    case DType::F16:
      launch_gemv<__half>(x, mi, k, ldx, w, n, bias, y, ldy, stream);
      break;
    default:
      launch_gemv<__nv_bfloat16>(x, mi, k, ldx, w, n, bias, y, ldy, stream);
      break;
  }
  CUDA_CHECK(cudaGetLastError());
}

size_t gemm_scratch_bytes(int64_t m, int64_t k, int64_t n, DType w_dtype, GemmPrecision precision) {
  if (m <= kGemvMaxRows || w_dtype == DType::F32) return 0;
  if (precision == GemmPrecision::Fast) return static_cast<size_t>(m * k) * dtype_size(w_dtype);
  return static_cast<size_t>(fp32_tile_rows(k, n) * k) * sizeof(float);
}

void gemm_xwt_cuda(cublasHandle_t handle, const float* x, int64_t m, int64_t k, int64_t ldx, const void* w,
                   DType w_dtype, int64_t n, const float* bias, float* y, int64_t ldy, void* scratch,
                   GemmPrecision precision, cudaStream_t stream) {
  check_weight_dtype(w_dtype);
  CYPRIS_CHECK(m >= 0 && k > 0 && n > 0 && ldx >= k && ldy >= n, "gemm_xwt_cuda: m {} k {} n {} ldx {} ldy {}", m, k,
               n, ldx, ldy);
  if (m == 0) return;
  if (m <= kGemvMaxRows) {
    gemv_xwt_cuda(x, m, k, ldx, w, w_dtype, n, bias, y, ldy, stream);
    return;
  }
  CYPRIS_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && ldx <= INT32_MAX && ldy <= INT32_MAX,
               "gemm_xwt_cuda: sizes exceed cuBLAS's 32-bit limits");
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is column-major yᵀ[n, m] = wᵀ(op T on the [k, n] view) · xᵀ.
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if (w_dtype == DType::F32) {
    CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, static_cast<const float*>(w), K, x,
                             static_cast<int>(ldx), &beta, y, static_cast<int>(ldy)));
  } else if (precision == GemmPrecision::Fast) {
    CYPRIS_CHECK(scratch != nullptr, "gemm_xwt_cuda: scratch memory is missing");
    convert_from_f32_cuda(x, m, k, ldx, w_dtype, scratch, stream);
    const cudaDataType_t t = cuda_type(w_dtype);
    CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, t, K, scratch, t, K, &beta, y,
                              CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    CYPRIS_CHECK(scratch != nullptr, "gemm_xwt_cuda: scratch memory is missing");
    const int64_t tile = fp32_tile_rows(k, n);
    float* wf = static_cast<float*>(scratch);
    for (int64_t n0 = 0; n0 < n; n0 += tile) {
      const int64_t nt = std::min(tile, n - n0);
      convert_to_f32_cuda(static_cast<const char*>(w) + n0 * k * dtype_size(w_dtype), w_dtype, nt * k, wf, stream);
      CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nt), M, K, &alpha, wf, K, x,
                               static_cast<int>(ldx), &beta, y + n0, static_cast<int>(ldy)));
    }
  }
  if (bias) add_bias_cuda(y, m, n, ldy, bias, stream);
}

}  // namespace cypris
