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
#include <type_traits>
#include <vector>

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
  load8_ldg(p, out);
}

template <>
__device__ __forceinline__ void load_vec<__nv_bfloat16>(const __nv_bfloat16* p, float* out) {
  load8_ldg(p, out);
}

// V consecutive activations as fp32: V = 8 (16-bit weights: one 16-byte load of 16-bit x, two of
// fp32 x) or 4 (fp32 weights and x).
template <int V, typename TX>
__device__ __forceinline__ void load_x(const TX* p, float* out) {
  if constexpr (V == 8) {
    load8(p, out);
  } else {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  }
}

// Weight row chunks each lane has in flight before the first multiply.
constexpr int kGemvUnroll = 4;

// One warp: output column col of the m rows, y[r, col] = x[r, :] · w[col, :] (+ bias[col]).
template <typename TW, typename TX, typename TY, int MAXM, bool VEC>
__device__ __forceinline__ void gemv_column(const TX* __restrict__ x, int m, int64_t k, int64_t ldx,
                                            const TW* __restrict__ w, int64_t col, const float* __restrict__ bias,
                                            TY* __restrict__ y, int64_t ldy) {
  const int lane = threadIdx.x & 31;
  const TW* wr = w + col * k;
  float acc[MAXM];
#pragma unroll
  for (int r = 0; r < MAXM; ++r) acc[r] = 0.0f;
  if constexpr (VEC) {
    constexpr int V = 16 / sizeof(TW);
    constexpr int64_t kStep = 32 * V;
    int64_t i = static_cast<int64_t>(lane) * V;
    // kGemvUnroll 16-byte weight loads in flight per lane, then the multiplies.
    for (; i + (kGemvUnroll - 1) * kStep < k; i += kGemvUnroll * kStep) {
      float wf[kGemvUnroll][V];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) load_vec<TW>(wr + i + u * kStep, wf[u]);
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) {
#pragma unroll
          for (int u = 0; u < kGemvUnroll; ++u) {
            float xv[V];
            load_x<V>(x + r * ldx + i + u * kStep, xv);
#pragma unroll
            for (int v = 0; v < V; ++v) acc[r] += wf[u][v] * xv[v];
          }
        }
      }
    }
    for (; i < k; i += kStep) {
      float wf[V];
      load_vec<TW>(wr + i, wf);
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) {
          float xv[V];
          load_x<V>(x + r * ldx + i, xv);
#pragma unroll
          for (int v = 0; v < V; ++v) acc[r] += wf[v] * xv[v];
        }
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += 32) {
      const float wv = to_float(wr[i]);
#pragma unroll
      for (int r = 0; r < MAXM; ++r) {
        if (r < m) acc[r] += wv * to_float(x[r * ldx + i]);
      }
    }
  }
  const float b = bias ? bias[col] : 0.0f;
#pragma unroll
  for (int r = 0; r < MAXM; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < m) y[r * ldy + col] = from_float<TY>(s + b);
  }
}

template <typename TW, typename TX, typename TY, int MAXM, bool VEC>
static __global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const TX* __restrict__ x, int m, int64_t k,
                                                                  int64_t ldx, const TW* __restrict__ w, int64_t n,
                                                                  const float* __restrict__ bias,
                                                                  TY* __restrict__ y, int64_t ldy) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (kGemvThreads / 32) + (threadIdx.x >> 5);
  if (col >= n) return;
  gemv_column<TW, TX, TY, MAXM, VEC>(x, m, k, ldx, w, col, bias, y, ldy);
}

// The groups of one grouped launch, passed by value (kernel parameter space, no upload).
struct GemvGroupTable {
  GemmGroup g[kGemvGroupsPerLaunch];
};

// blockIdx.y picks the group: its weight over its own rows of x and y.
template <typename TW, typename TX, typename TY, int MAXM, bool VEC>
static __global__ void __launch_bounds__(kGemvThreads) gemv_grouped_kernel(const TX* __restrict__ x, int64_t k,
                                                                          int64_t ldx, const GemvGroupTable table,
                                                                          int64_t n, TY* __restrict__ y, int64_t ldy) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * (kGemvThreads / 32) + (threadIdx.x >> 5);
  if (col >= n) return;
  const GemmGroup& g = table.g[blockIdx.y];
  gemv_column<TW, TX, TY, MAXM, VEC>(x + g.first * ldx, static_cast<int>(g.rows), k, ldx, static_cast<const TW*>(g.w),
                                     col, nullptr, y + g.first * ldy, ldy);
}

template <typename TW, typename TX, typename TY, bool VEC>
void launch_gemv_rows(const TX* x, int m, int64_t k, int64_t ldx, const TW* w, int64_t n, const float* bias, TY* y,
                      int64_t ldy, cudaStream_t stream) {
  const unsigned grid = ceil_div(n, kGemvThreads / 32);
  if (m <= 1) {
    gemv_kernel<TW, TX, TY, 1, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  } else if (m <= 2) {
    gemv_kernel<TW, TX, TY, 2, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  } else if (m <= 4) {
    gemv_kernel<TW, TX, TY, 4, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  } else {
    gemv_kernel<TW, TX, TY, 8, VEC><<<grid, kGemvThreads, 0, stream>>>(x, m, k, ldx, w, n, bias, y, ldy);
  }
}

// Whether every vector load of the GEMV is aligned: k a whole number of vectors, x's rows and the
// weights on 16-byte (or, for fp32 x under 16-bit weights, float4) boundaries.
template <typename TW, typename TX>
bool gemv_vec_ok(const void* x, int64_t k, int64_t ldx, const void* w) {
  constexpr int V = 16 / sizeof(TW);
  // x rows are read V elements at a time: 16-byte aligned chunks for 16-bit x, float4 pairs for fp32.
  const int x_align = V * static_cast<int>(sizeof(TX)) >= 16 ? 16 : V * static_cast<int>(sizeof(TX));
  return k % V == 0 && (ldx * static_cast<int64_t>(sizeof(TX))) % x_align == 0 &&
         reinterpret_cast<uintptr_t>(x) % x_align == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

template <typename TW, typename TX, typename TY>
void launch_gemv(const void* x, int m, int64_t k, int64_t ldx, const void* w, int64_t n, const float* bias, void* y,
                 int64_t ldy, cudaStream_t stream) {
  const TX* xt = static_cast<const TX*>(x);
  const TW* wt = static_cast<const TW*>(w);
  TY* yt = static_cast<TY*>(y);
  if (gemv_vec_ok<TW, TX>(x, k, ldx, w)) {
    launch_gemv_rows<TW, TX, TY, true>(xt, m, k, ldx, wt, n, bias, yt, ldy, stream);
  } else {
    launch_gemv_rows<TW, TX, TY, false>(xt, m, k, ldx, wt, n, bias, yt, ldy, stream);
  }
}

template <typename TW, typename TX, typename TY, bool VEC>
void launch_gemv_grouped_rows(const TX* x, int64_t k, int64_t ldx, const GemvGroupTable& table, int groups, int max_m,
                              int64_t n, TY* y, int64_t ldy, cudaStream_t stream) {
  const dim3 grid(ceil_div(n, kGemvThreads / 32), static_cast<unsigned>(groups));
  if (max_m <= 1) {
    gemv_grouped_kernel<TW, TX, TY, 1, VEC><<<grid, kGemvThreads, 0, stream>>>(x, k, ldx, table, n, y, ldy);
  } else if (max_m <= 2) {
    gemv_grouped_kernel<TW, TX, TY, 2, VEC><<<grid, kGemvThreads, 0, stream>>>(x, k, ldx, table, n, y, ldy);
  } else if (max_m <= 4) {
    gemv_grouped_kernel<TW, TX, TY, 4, VEC><<<grid, kGemvThreads, 0, stream>>>(x, k, ldx, table, n, y, ldy);
  } else {
    gemv_grouped_kernel<TW, TX, TY, 8, VEC><<<grid, kGemvThreads, 0, stream>>>(x, k, ldx, table, n, y, ldy);
  }
}

// Up to kGemvGroupsPerLaunch groups per launch, each a grid row.
template <typename TW, typename TX, typename TY>
void launch_gemv_grouped(const void* x, int64_t k, int64_t ldx, const GemmGroup* groups, int num_groups, int64_t n,
                         void* y, int64_t ldy, cudaStream_t stream) {
  const TX* xt = static_cast<const TX*>(x);
  TY* yt = static_cast<TY*>(y);
  for (int g0 = 0; g0 < num_groups; g0 += kGemvGroupsPerLaunch) {
    const int count = std::min(kGemvGroupsPerLaunch, num_groups - g0);
    GemvGroupTable table{};
    bool vec = true;
    int max_m = 1;
    for (int i = 0; i < count; ++i) {
      table.g[i] = groups[g0 + i];
      vec = vec && gemv_vec_ok<TW, TX>(x, k, ldx, groups[g0 + i].w);
      max_m = std::max(max_m, static_cast<int>(groups[g0 + i].rows));
    }
    if (vec) {
      launch_gemv_grouped_rows<TW, TX, TY, true>(xt, k, ldx, table, count, max_m, n, yt, ldy, stream);
    } else {
      launch_gemv_grouped_rows<TW, TX, TY, false>(xt, k, ldx, table, count, max_m, n, yt, ldy, stream);
    }
  }
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls launch(TypeTag<TW>, TypeTag<TX>, TypeTag<TY>) for the (weight, activation, output) types
// the GEMV kernel is built for: activations fp32 or the weight's type, output fp32 or the
// activations' type. False when the combination is not one of them.
template <typename Launch>
bool with_gemv_types(DType w_dtype, DType x_dtype, DType y_dtype, Launch launch) {
  auto for_weight = [&](auto tw) {
    using TW = typename decltype(tw)::type;
    constexpr bool w16 = !std::is_same_v<TW, float>;
    const DType wd = std::is_same_v<TW, float> ? DType::F32 : std::is_same_v<TW, __half> ? DType::F16 : DType::BF16;
    if (x_dtype == DType::F32 && y_dtype == DType::F32) {
      launch(tw, TypeTag<float>{}, TypeTag<float>{});
      return true;
    }
    if constexpr (w16) {
      if (x_dtype == wd && y_dtype == wd) {
        launch(tw, tw, tw);
        return true;
      }
      if (x_dtype == wd && y_dtype == DType::F32) {
        launch(tw, tw, TypeTag<float>{});
        return true;
      }
    }
    return false;
  };
  switch (w_dtype) {
    case DType::F32:
      return for_weight(TypeTag<float>{});
    case DType::F16:
      return for_weight(TypeTag<__half>{});
    default:
      return for_weight(TypeTag<__nv_bfloat16>{});
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

bool gemv_supported(DType x_dtype, DType w_dtype, DType y_dtype) {
  if (x_dtype == DType::F32 && y_dtype == DType::F32) return true;
  return w_dtype != DType::F32 && x_dtype == w_dtype && (y_dtype == w_dtype || y_dtype == DType::F32);
}

void gemv_xwt_cuda(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
                   int64_t n, const float* bias, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream) {
  check_weight_dtype(w_dtype);
  CYPRIS_CHECK(m >= 0 && m <= kGemvMaxRows && k > 0 && n > 0 && ldx >= k && ldy >= n,
               "gemv_xwt_cuda: m {} (at most {}) k {} n {} ldx {} ldy {}", m, kGemvMaxRows, k, n, ldx, ldy);
  if (m == 0) return;
  const int mi = static_cast<int>(m);
  const bool ok = with_gemv_types(w_dtype, x_dtype, y_dtype, [&](auto tw, auto tx, auto ty) {
    launch_gemv<typename decltype(tw)::type, typename decltype(tx)::type, typename decltype(ty)::type>(
        x, mi, k, ldx, w, n, bias, y, ldy, stream);
  });
  CYPRIS_CHECK(ok, "gemv_xwt_cuda: {} activations x {} weights -> {} output is not supported", dtype_name(x_dtype),
               dtype_name(w_dtype), dtype_name(y_dtype));
  CUDA_CHECK(cudaGetLastError());
}

void gemv_grouped_xwt_cuda(const void* x, DType x_dtype, int64_t k, int64_t ldx, const GemmGroup* groups,
                           int64_t num_groups, DType w_dtype, int64_t n, void* y, DType y_dtype, int64_t ldy,
                           cudaStream_t stream) {
  check_weight_dtype(w_dtype);
  CYPRIS_CHECK(k > 0 && n > 0 && ldx >= k && ldy >= n && num_groups >= 0 && num_groups <= INT32_MAX,
               "gemv_grouped_xwt_cuda: k {} n {} ldx {} ldy {} groups {}", k, n, ldx, ldy, num_groups);
  for (int64_t g = 0; g < num_groups; ++g) {
    CYPRIS_CHECK(groups[g].rows >= 1 && groups[g].rows <= kGemvMaxRows && groups[g].first >= 0 && groups[g].w,
                 "gemv_grouped_xwt_cuda: group {} has {} rows at {} (1 to {})", g, groups[g].rows, groups[g].first,
                 kGemvMaxRows);
  }
  if (num_groups == 0) return;
  const bool ok = with_gemv_types(w_dtype, x_dtype, y_dtype, [&](auto tw, auto tx, auto ty) {
    launch_gemv_grouped<typename decltype(tw)::type, typename decltype(tx)::type, typename decltype(ty)::type>(
        x, k, ldx, groups, static_cast<int>(num_groups), n, y, ldy, stream);
  });
  CYPRIS_CHECK(ok, "gemv_grouped_xwt_cuda: {} activations x {} weights -> {} output is not supported",
               dtype_name(x_dtype), dtype_name(w_dtype), dtype_name(y_dtype));
  CUDA_CHECK(cudaGetLastError());
}

bool gemm_grouped_cuda(cublasHandle_t handle, const void* x, int64_t k, int64_t ldx, const GemmGroup* groups,
                       int64_t num_groups, DType dtype, int64_t n, void* y, int64_t ldy, void** ptr_scratch,
                       cudaStream_t stream) {
  CYPRIS_CHECK(dtype == DType::F16 || dtype == DType::BF16, "gemm_grouped_cuda: {} is not a 16-bit type",
               dtype_name(dtype));
  CYPRIS_CHECK(n <= INT32_MAX && k <= INT32_MAX && ldx <= INT32_MAX && ldy <= INT32_MAX && num_groups <= INT32_MAX,
               "gemm_grouped_cuda: sizes exceed cuBLAS's 32-bit limits");
  if (num_groups == 0) return true;
  // Every group is its own cuBLAS group of one problem (the row counts differ). Column-major, as
  // gemm_xwt_cuda: yᵀ[n, rows] = (w as [k, n])ᵀ · xᵀ[k, rows].
  const auto g = static_cast<size_t>(num_groups);
  const size_t es = dtype_size(dtype);
  std::vector<cublasOperation_t> op_w(g, CUBLAS_OP_T), op_x(g, CUBLAS_OP_N);
  std::vector<int> ms(g, static_cast<int>(n)), ns(g), ks(g, static_cast<int>(k)), lda(g, static_cast<int>(k)),
      ldb(g, static_cast<int>(ldx)), ldc(g, static_cast<int>(ldy)), sizes(g, 1);
  std::vector<float> alpha(g, 1.0f), beta(g, 0.0f);
  std::vector<const void*> ptrs(3 * g);  // A (weights), B (x rows), C (y rows)
  for (size_t i = 0; i < g; ++i) {
    CYPRIS_CHECK(groups[i].rows > 0 && groups[i].rows <= INT32_MAX && groups[i].w,
                 "gemm_grouped_cuda: group {} has {} rows", i, groups[i].rows);
    ns[i] = static_cast<int>(groups[i].rows);
    ptrs[i] = groups[i].w;
    ptrs[g + i] = static_cast<const char*>(x) + static_cast<size_t>(groups[i].first * ldx) * es;
    ptrs[2 * g + i] = static_cast<const char*>(y) + static_cast<size_t>(groups[i].first * ldy) * es;
  }
  // From pageable memory: the copy is staged before this returns, so ptrs may go out of scope.
  CUDA_CHECK(cudaMemcpyAsync(ptr_scratch, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice, stream));
  const cudaDataType_t t = cuda_type(dtype);
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      handle, op_w.data(), op_x.data(), ms.data(), ns.data(), ks.data(), alpha.data(),
      reinterpret_cast<const void* const*>(ptr_scratch), t, lda.data(),
      reinterpret_cast<const void* const*>(ptr_scratch + g), t, ldb.data(), beta.data(),
      reinterpret_cast<void* const*>(ptr_scratch + 2 * g), t, ldc.data(), static_cast<int>(num_groups), sizes.data(),
      CUBLAS_COMPUTE_32F);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  CUBLAS_CHECK(st);
  return true;
}

namespace {

// What gemm_xwt_cuda does for a combination of types (and which scratch it needs).
struct GemmPlan {
  bool convert_x = false;  // x rounded into scratch (to the weight type, or fp32 for fp32 math)
  bool f32_out = false;    // result made in fp32 scratch, then converted to y's type
  bool fp32_tiles = false; // 16-bit weights widened to fp32 in tiles (GemmPrecision::Fp32)
};

GemmPlan plan_gemm(DType x_dtype, DType w_dtype, DType y_dtype, GemmPrecision precision) {
  GemmPlan p;
  if (w_dtype == DType::F32 || precision == GemmPrecision::Fp32) {
    // fp32 SGEMM: fp32 in and out.
    p.convert_x = x_dtype != DType::F32;
    p.f32_out = y_dtype != DType::F32;
    p.fp32_tiles = w_dtype != DType::F32;
  } else {
    // Tensor cores: x in the weight's type; out fp32 or the weight's type.
    p.convert_x = x_dtype != w_dtype;
    p.f32_out = y_dtype != DType::F32 && y_dtype != w_dtype;
  }
  return p;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

size_t gemm_scratch_bytes(int64_t m, int64_t k, int64_t n, DType x_dtype, DType w_dtype, DType y_dtype,
                          GemmPrecision precision) {
  if (m <= kGemvMaxRows && gemv_supported(x_dtype, w_dtype, y_dtype)) return 0;
  const GemmPlan p = plan_gemm(x_dtype, w_dtype, y_dtype, precision);
  size_t bytes = 0;
  if (p.convert_x) {
    const DType xt = (w_dtype == DType::F32 || precision == GemmPrecision::Fp32) ? DType::F32 : w_dtype;
    bytes += align256(static_cast<size_t>(m * k) * dtype_size(xt));
  }
  if (p.f32_out) bytes += align256(static_cast<size_t>(m * n) * sizeof(float));
  if (p.fp32_tiles) bytes += align256(static_cast<size_t>(fp32_tile_rows(k, n) * k) * sizeof(float));
  return bytes;
}

void gemm_xwt_cuda(cublasHandle_t handle, const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ldx,
                   const void* w, DType w_dtype, int64_t n, const float* bias, void* y, DType y_dtype, int64_t ldy,
                   void* scratch, GemmPrecision precision, cudaStream_t stream) {
  check_weight_dtype(w_dtype);
  CYPRIS_CHECK(m >= 0 && k > 0 && n > 0 && ldx >= k && ldy >= n, "gemm_xwt_cuda: m {} k {} n {} ldx {} ldy {}", m, k,
               n, ldx, ldy);
  if (m == 0) return;
  if (m <= kGemvMaxRows && gemv_supported(x_dtype, w_dtype, y_dtype)) {
    gemv_xwt_cuda(x, x_dtype, m, k, ldx, w, w_dtype, n, bias, y, y_dtype, ldy, stream);
    return;
  }
  CYPRIS_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && ldx <= INT32_MAX && ldy <= INT32_MAX,
               "gemm_xwt_cuda: sizes exceed cuBLAS's 32-bit limits");
  const GemmPlan plan = plan_gemm(x_dtype, w_dtype, y_dtype, precision);
  const bool fp32_math = w_dtype == DType::F32 || precision == GemmPrecision::Fp32;
  CYPRIS_CHECK(scratch != nullptr || !(plan.convert_x || plan.f32_out || plan.fp32_tiles),
               "gemm_xwt_cuda: scratch memory is missing");
  char* sp = static_cast<char*>(scratch);
  const void* xin = x;
  int64_t ldxin = ldx;
  if (plan.convert_x) {
    const DType xt = fp32_math ? DType::F32 : w_dtype;
    convert_cuda(x, x_dtype, m, k, ldx, sp, xt, k, stream);
    xin = sp;
    ldxin = k;
    sp += align256(static_cast<size_t>(m * k) * dtype_size(xt));
  }
  void* yout = y;
  int64_t ldyout = ldy;
  DType yt = y_dtype;
  if (plan.f32_out) {
    yout = sp;
    ldyout = n;
    yt = DType::F32;
    sp += align256(static_cast<size_t>(m * n) * sizeof(float));
  }
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is column-major yᵀ[n, m] = wᵀ(op T on the [k, n] view) · xᵀ.
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if (w_dtype == DType::F32) {
    CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, static_cast<const float*>(w), K,
                             static_cast<const float*>(xin), static_cast<int>(ldxin), &beta,
                             static_cast<float*>(yout), static_cast<int>(ldyout)));
  } else if (!fp32_math) {
    const cudaDataType_t t = cuda_type(w_dtype);
    CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, t, K, xin, t,
                              static_cast<int>(ldxin), &beta, yout, cuda_type(yt), static_cast<int>(ldyout),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    const int64_t tile = fp32_tile_rows(k, n);
    float* wf = reinterpret_cast<float*>(sp);
    for (int64_t n0 = 0; n0 < n; n0 += tile) {
      const int64_t nt = std::min(tile, n - n0);
      convert_to_f32_cuda(static_cast<const char*>(w) + n0 * k * dtype_size(w_dtype), w_dtype, nt * k, wf, stream);
      CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nt), M, K, &alpha, wf, K,
                               static_cast<const float*>(xin), static_cast<int>(ldxin), &beta,
                               static_cast<float*>(yout) + n0, static_cast<int>(ldyout)));
    }
  }
  if (plan.f32_out) {
    // Bias in fp32 before the one rounding to y's type.
    if (bias) add_bias_cuda(yout, DType::F32, m, n, ldyout, bias, stream);
    convert_cuda(yout, DType::F32, m, n, ldyout, y, y_dtype, ldy, stream);
  } else if (bias) {
    add_bias_cuda(y, y_dtype, m, n, ldy, bias, stream);
  }
}

}  // namespace cypris
