// Block-quantized weights on the GPU (see quant_gemm.h). The GEMV, dequantize and embedding kernels
// passed their tests on an H200 (2026-11-26); the grouped GEMV (MoE experts) never ran on a GPU.
//
// Design: every type decodes through one device function, dq_group<T>(block, g, w[16]), which
// produces the 16 values of group g of a block as (D * s_g) * q - M * m_g — the same form and order
// of operations as the CPU reference, with __fmul_rn/__fsub_rn so nvcc cannot fuse them into an FMA
// (the CPU values, and ggml's, are unfused).
//
// GEMV (decode): one warp per output row; lane l takes groups l, l + 32, ... of the row, so the
// quantized bytes are read once, consecutive lanes reading neighbouring groups of the same or the
// next block. The grouped GEMV is the same warp code with blockIdx.y choosing the group (an expert's
// weight and its rows), the groups passed by value as kernel parameters. Each lane dots its 16 decoded weights with up to 8 fp32 activation rows held in
// global memory (small, L1/L2 resident); a warp reduction gives the row's outputs. A first version:
// simple and exact in the activations, not yet tuned to the 80%-of-copy-bandwidth target (that
// needs vectorised 16-byte loads of whole blocks and the int8 dp4a path).
//
// Dequantize (prefill, embedding): one thread per group of 16, writing fp16 or fp32.
//
// FP8 weights (F8G128) go through the same paths: decoded in the GEMV, dequantized to 16-bit tiles
// for prefill. Not cuBLASLt's FP8 GEMM (sm_89+) yet.
#include "kernels/cuda/quant/quant_gemm.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "engine/common/error.h"
#include "kernels/common/bnb_blocks.h"
#include "kernels/common/fp8.h"
#include "kernels/common/fp8_blocks.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/common/wq_blocks.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace quant;
using cuda_detail::from_float;
using cuda_detail::load8;
using cuda_detail::warp_sum;

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float wval(float dl, int q, float ml) {
  return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
}
// Element j of a 32-value block in the Q4_0 nibble layout.
__device__ __forceinline__ int nib32(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }
__device__ __forceinline__ int q2_bits(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

template <DType T>
struct Traits;
template <> struct Traits<DType::Q4_0> { static constexpr int kElems = 32, kBytes = 18; };
template <> struct Traits<DType::Q4_1> { static constexpr int kElems = 32, kBytes = 20; };
template <> struct Traits<DType::Q5_0> { static constexpr int kElems = 32, kBytes = 22; };
template <> struct Traits<DType::Q5_1> { static constexpr int kElems = 32, kBytes = 24; };
template <> struct Traits<DType::Q8_0> { static constexpr int kElems = 32, kBytes = 34; };
template <> struct Traits<DType::IQ4_NL> { static constexpr int kElems = 32, kBytes = 18; };
template <> struct Traits<DType::Q2_K> { static constexpr int kElems = 256, kBytes = 84; };
template <> struct Traits<DType::Q3_K> { static constexpr int kElems = 256, kBytes = 110; };
template <> struct Traits<DType::Q4_K> { static constexpr int kElems = 256, kBytes = 144; };
template <> struct Traits<DType::Q5_K> { static constexpr int kElems = 256, kBytes = 176; };
template <> struct Traits<DType::Q6_K> { static constexpr int kElems = 256, kBytes = 210; };
template <> struct Traits<DType::IQ4_XS> { static constexpr int kElems = 256, kBytes = 136; };
// The repacked GPTQ/AWQ blocks (kernels/common/wq_blocks.h): w = d * q - d * z.
template <> struct Traits<DType::W4G32> { static constexpr int kElems = 32, kBytes = 20; };
template <> struct Traits<DType::W4G64> { static constexpr int kElems = 64, kBytes = 36; };
template <> struct Traits<DType::W4G128> { static constexpr int kElems = 128, kBytes = 68; };
template <> struct Traits<DType::W8G32> { static constexpr int kElems = 32, kBytes = 36; };
template <> struct Traits<DType::W8G128> { static constexpr int kElems = 128, kBytes = 132; };
// FP8 weights (kernels/common/fp8_blocks.h): w = fp8 * d.
template <> struct Traits<DType::F8G128> { static constexpr int kElems = 128, kBytes = 132; };
// bitsandbytes 4-bit weights (kernels/common/bnb_blocks.h): w = table[q] * d.
template <> struct Traits<DType::NF4G64> { static constexpr int kElems = 64, kBytes = 36; };
template <> struct Traits<DType::FP4G64> { static constexpr int kElems = 64, kBytes = 36; };
__constant__ float kNf4Dev[16] = CYPRIS_BNB_NF4_TABLE;
__constant__ float kFp4Dev[16] = CYPRIS_BNB_FP4_TABLE;

template <DType T>
__device__ __forceinline__ void dq_group(const uint8_t* blk, int g, float w[16]) {
  if constexpr (T == DType::NF4G64 || T == DType::FP4G64) {
    // The same fp32 product as the CPU's dequantize_b4_row. Groups 0, 1: the low nibbles of
    // qs[0..31]; groups 2, 3: the high nibbles.
    const auto* b = reinterpret_cast<const BlockB4*>(blk);
    const float d = b->d;
    const float* table = T == DType::NF4G64 ? kNf4Dev : kFp4Dev;
    const uint8_t* qs = b->qs + 16 * (g % 2);
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = __fmul_rn(table[g < 2 ? qs[l] & 0xF : qs[l] >> 4], d);
  } else if constexpr (T == DType::F8G128) {
    // The same fp32 product as the CPU's dequantize_f8_row (fp8 -> fp32 is exact).
    const auto* b = reinterpret_cast<const BlockF8*>(blk);
    const float d = b->d;
    const uint8_t* qs = b->qs + 16 * g;
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = __fmul_rn(fp8_e4m3_to_f32(qs[l]), d);
  } else if constexpr (T == DType::W4G32 || T == DType::W4G64 || T == DType::W4G128) {
    const auto* b = reinterpret_cast<const BlockW4<Traits<T>::kElems>*>(blk);
    const float d = h2f(b->d), ml = __fmul_rn(d, static_cast<float>(b->z));
    const uint8_t* qs = b->qs + 16 * (g / 2);
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = wval(d, g % 2 == 0 ? qs[l] & 0xF : qs[l] >> 4, ml);
  } else if constexpr (T == DType::W8G32 || T == DType::W8G128) {
    const auto* b = reinterpret_cast<const BlockW8<Traits<T>::kElems>*>(blk);
    const float d = h2f(b->d), ml = __fmul_rn(d, static_cast<float>(b->z));
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = wval(d, b->qs[16 * g + l], ml);
  } else if constexpr (T == DType::Q4_0 || T == DType::IQ4_NL) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(blk);
    const float d = h2f(b->d);
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int v = nib32(b->qs, 16 * g + l);
      w[l] = wval(d, T == DType::Q4_0 ? v - 8 : kIq4Values[v], 0.0f);
    }
  } else if constexpr (T == DType::Q4_1) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(blk);
    const float d = h2f(b->d), m = -h2f(b->m);
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = wval(d, nib32(b->qs, 16 * g + l), m);
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    using B = std::conditional_t<T == DType::Q5_0, BlockQ5_0, BlockQ5_1>;
    const auto* b = reinterpret_cast<const B*>(blk);
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    const float d = h2f(b->d);
    float m = 0.0f;
    if constexpr (T == DType::Q5_1) m = -h2f(b->m);
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int j = 16 * g + l;
      const int v = nib32(b->qs, j) | (((qh >> j) & 1) << 4);
      w[l] = wval(d, T == DType::Q5_0 ? v - 16 : v, m);
    }
  } else if constexpr (T == DType::Q8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(blk);
    const float d = h2f(b->d);
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = wval(d, b->qs[16 * g + l], 0.0f);
  } else if constexpr (T == DType::Q2_K) {
    const auto* b = reinterpret_cast<const BlockQ2_K*>(blk);
    const float dl = __fmul_rn(h2f(b->d), static_cast<float>(b->scales[g] & 0xF));
    const float ml = __fmul_rn(h2f(b->dmin), static_cast<float>(b->scales[g] >> 4));
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = wval(dl, q2_bits(b->qs, 16 * g + l), ml);
  } else if constexpr (T == DType::Q3_K) {
    const auto* b = reinterpret_cast<const BlockQ3_K*>(blk);
    const int low = (b->scales[g % 8] >> (g < 8 ? 0 : 4)) & 0xF;
    const int high = (b->scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    const float dl = __fmul_rn(h2f(b->d), static_cast<float>((low | (high << 4)) - 32));
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * g + l;
      const int hbit = (b->hmask[e % 32] >> (e / 32)) & 1;
      w[l] = wval(dl, q2_bits(b->qs, e) - (hbit ? 0 : 4), 0.0f);
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    using B = std::conditional_t<T == DType::Q4_K, BlockQ4_K, BlockQ5_K>;
    const auto* b = reinterpret_cast<const B*>(blk);
    uint8_t sc, mn;
    k4_scale_min(g / 2, b->scales, &sc, &mn);
    const float dl = __fmul_rn(h2f(b->d), static_cast<float>(sc));
    const float ml = __fmul_rn(h2f(b->dmin), static_cast<float>(mn));
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * g + l, c = e / 64, i = e % 32;
      int v = (e % 64) < 32 ? b->qs[32 * c + i] & 0xF : b->qs[32 * c + i] >> 4;
      if constexpr (T == DType::Q5_K) v |= ((b->qh[i] >> (e / 32)) & 1) << 4;
      w[l] = wval(dl, v, ml);
    }
  } else if constexpr (T == DType::Q6_K) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(blk);
    const float dl = __fmul_rn(h2f(b->d), static_cast<float>(b->scales[g]));
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * g + l, h = e / 128, p = (e % 128) / 32, i = e % 32;
      const uint8_t lo = b->ql[64 * h + 32 * (p & 1) + i];
      const int low4 = p < 2 ? lo & 0xF : lo >> 4;
      const int high2 = (b->qh[32 * h + i] >> (2 * p)) & 3;
      w[l] = wval(dl, (low4 | (high2 << 4)) - 32, 0.0f);
    }
  } else {  // IQ4_XS
    const auto* b = reinterpret_cast<const BlockIQ4_XS*>(blk);
    const int j = g / 2;
    const int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4);
    const float dl = __fmul_rn(h2f(b->d), static_cast<float>(ls - 32));
    const uint8_t* qs = b->qs + 16 * j;
#pragma unroll
    for (int l = 0; l < 16; ++l) w[l] = wval(dl, kIq4Values[nib32(qs, 16 * (g % 2) + l)], 0.0f);
  }
}

template <DType T>
__device__ __forceinline__ void dq_group_of_row(const uint8_t* row, int64_t g, float w[16]) {
  constexpr int kGroups = Traits<T>::kElems / 16;
  dq_group<T>(row + (g / kGroups) * Traits<T>::kBytes, static_cast<int>(g % kGroups), w);
}

// One warp: output column j of the m rows, y[r, j] = x[r, :] · dequantized w row j (+ bias[j]).
// x is fp32 or 16-bit (16 values per group: two 16-byte loads of 16-bit x, four of fp32), y fp32
// or x's type; the products and sums are fp32 either way.
template <DType T, typename TX, typename TY>
__device__ __forceinline__ void quant_gemv_column(const TX* __restrict__ x, int m, int64_t k, int64_t ldx,
                                                  const uint8_t* __restrict__ w, int64_t j,
                                                  const float* __restrict__ bias, TY* __restrict__ y, int64_t ldy) {
  const int lane = threadIdx.x % 32;
  const uint8_t* row = w + j * (k / Traits<T>::kElems) * Traits<T>::kBytes;
  float acc[kQuantGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kQuantGemvMaxRows; ++r) acc[r] = 0.0f;
  for (int64_t g = lane; g < k / 16; g += 32) {
    float wv[16];
    dq_group_of_row<T>(row, g, wv);
#pragma unroll
    for (int r = 0; r < kQuantGemvMaxRows; ++r) {
      if (r < m) {
        float v[16];
        load8(x + r * ldx + g * 16, v);
        load8(x + r * ldx + g * 16 + 8, v + 8);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          acc[r] += wv[4 * q] * v[4 * q] + wv[4 * q + 1] * v[4 * q + 1] + wv[4 * q + 2] * v[4 * q + 2] +
                    wv[4 * q + 3] * v[4 * q + 3];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kQuantGemvMaxRows; ++r) {
    if (r < m) {
      const float s = warp_sum(acc[r]);
      if (lane == 0) y[r * ldy + j] = from_float<TY>(bias ? s + bias[j] : s);
    }
  }
}

template <DType T, typename TX, typename TY>
static __global__ void quant_gemv_kernel(const TX* __restrict__ x, int m, int64_t k, int64_t ldx,
                                         const uint8_t* __restrict__ w, int64_t n, const float* __restrict__ bias,
                                         TY* __restrict__ y, int64_t ldy) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (j >= n) return;
  quant_gemv_column<T>(x, m, k, ldx, w, j, bias, y, ldy);
}

// The groups of one grouped launch, passed by value (kernel parameter space, no upload).
struct QuantGroupTable {
  GemmGroup g[kQuantGemvGroupsPerLaunch];
};

// blockIdx.y picks the group: its quantized weight over its own rows of x and y.
template <DType T, typename TX, typename TY>
static __global__ void quant_gemv_grouped_kernel(const TX* __restrict__ x, int64_t k, int64_t ldx,
                                                 const QuantGroupTable table, int64_t n, TY* __restrict__ y,
                                                 int64_t ldy) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (j >= n) return;
  const GemmGroup& g = table.g[blockIdx.y];
  quant_gemv_column<T>(x + g.first * ldx, static_cast<int>(g.rows), k, ldx, static_cast<const uint8_t*>(g.w), j,
                       nullptr, y + g.first * ldy, ldy);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls launch(TypeTag<TX>, TypeTag<TY>) for the activation and output types the GEMV is built
// for (quant_gemv_supported); false for any other pair.
template <typename Launch>
bool with_gemv_io(DType x_dtype, DType y_dtype, Launch launch) {
  auto with_x = [&](auto tx) {
    if (y_dtype == DType::F32) {
      launch(tx, TypeTag<float>{});
    } else {
      launch(tx, tx);
    }
  };
  if (!quant_gemv_supported(x_dtype, y_dtype)) return false;
  switch (x_dtype) {
    case DType::F32:
      with_x(TypeTag<float>{});
      break;
    case DType::F16:
      with_x(TypeTag<__half>{});
      break;
    default:
      with_x(TypeTag<__nv_bfloat16>{});
      break;
  }
  return true;
}

void check_gemv_x(const char* what, const void* x, DType x_dtype, DType y_dtype, int64_t ldx) {
  CYPRIS_CHECK(quant_gemv_supported(x_dtype, y_dtype), "{}: {} activations -> {} output is not supported", what,
               dtype_name(x_dtype), dtype_name(y_dtype));
  CYPRIS_CHECK(quant_gemv_aligned(x, x_dtype, ldx),
               "{}: x must be 16-byte aligned with rows a multiple of 16 bytes apart (row stride {})", what, ldx);
}

// One thread per group of 16: out row r = dequantized source row (ids ? ids[r] : row0 + r).
template <DType T, typename Out>
static __global__ void quant_dequant_kernel(const uint8_t* __restrict__ w, int64_t k, const int32_t* __restrict__ ids,
                                            int64_t vocab, int64_t row0, int64_t rows, Out* __restrict__ out) {
  const int64_t groups = k / 16;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * groups) return;
  const int64_t r = idx / groups, g = idx % groups;
  Out* o = out + r * k + g * 16;
  int64_t src = row0 + r;
  if (ids) {
    src = ids[r];
    if (src < 0 || src >= vocab) {
      for (int l = 0; l < 16; ++l) o[l] = cuda_detail::from_float<Out>(0.0f);
      return;
    }
  }
  float wv[16];
  dq_group_of_row<T>(w + src * (k / Traits<T>::kElems) * Traits<T>::kBytes, g, wv);
#pragma unroll
  for (int l = 0; l < 16; ++l) o[l] = cuda_detail::from_float<Out>(wv[l]);
}

// Expands BODY once per quantized type with T bound to it (C++17: no template lambdas).
#define CYPRIS_QUANT_DISPATCH(dtype, what, BODY)                                          \
  switch (dtype) {                                                                        \
    case DType::Q4_0: { constexpr DType T = DType::Q4_0; BODY; } break;                  \
    case DType::Q4_1: { constexpr DType T = DType::Q4_1; BODY; } break;                  \
    case DType::Q5_0: { constexpr DType T = DType::Q5_0; BODY; } break;                  \
    case DType::Q5_1: { constexpr DType T = DType::Q5_1; BODY; } break;                  \
    case DType::Q8_0: { constexpr DType T = DType::Q8_0; BODY; } break;                  \
    case DType::IQ4_NL: { constexpr DType T = DType::IQ4_NL; BODY; } break;              \
    case DType::Q2_K: { constexpr DType T = DType::Q2_K; BODY; } break;                  \
    case DType::Q3_K: { constexpr DType T = DType::Q3_K; BODY; } break;                  \
    case DType::Q4_K: { constexpr DType T = DType::Q4_K; BODY; } break;                  \
    case DType::Q5_K: { constexpr DType T = DType::Q5_K; BODY; } break;                  \
    case DType::Q6_K: { constexpr DType T = DType::Q6_K; BODY; } break;                  \
    case DType::IQ4_XS: { constexpr DType T = DType::IQ4_XS; BODY; } break;              \
    case DType::W4G32: { constexpr DType T = DType::W4G32; BODY; } break;                \
    case DType::W4G64: { constexpr DType T = DType::W4G64; BODY; } break;                \
    case DType::W4G128: { constexpr DType T = DType::W4G128; BODY; } break;              \
    case DType::W8G32: { constexpr DType T = DType::W8G32; BODY; } break;                \
    case DType::W8G128: { constexpr DType T = DType::W8G128; BODY; } break;              \
    case DType::F8G128: { constexpr DType T = DType::F8G128; BODY; } break;              \
    case DType::NF4G64: { constexpr DType T = DType::NF4G64; BODY; } break;              \
    case DType::FP4G64: { constexpr DType T = DType::FP4G64; BODY; } break;              \
    default: CYPRIS_FAIL("{}: {} is not a supported quantized type", what, dtype_name(dtype)); \
  }

void check_row(DType t, int64_t k, const char* what) {
  CYPRIS_CHECK(dtype_is_quantized(t), "{}: {} is not a quantized type", what, dtype_name(t));
  const int64_t be = dtype_block(t).elems;
  CYPRIS_CHECK(k > 0 && k % be == 0, "{}: row length {} is not a multiple of the {} block ({} values)", what, k,
               dtype_name(t), be);
}

}  // namespace

bool quant_gemv_supported(DType x_dtype, DType y_dtype) {
  const bool x_ok = x_dtype == DType::F32 || x_dtype == DType::F16 || x_dtype == DType::BF16;
  return x_ok && (y_dtype == DType::F32 || y_dtype == x_dtype);
}

bool quant_gemv_aligned(const void* x, DType x_dtype, int64_t ldx) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && (ldx * static_cast<int64_t>(dtype_size(x_dtype))) % 16 == 0;
}

void quant_gemv_cuda(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype,
                     int64_t n, const float* bias, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream) {
  check_row(w_dtype, k, "quant_gemv_cuda");
  CYPRIS_CHECK(m >= 0 && m <= kQuantGemvMaxRows, "quant_gemv_cuda: {} rows (at most {})", m, kQuantGemvMaxRows);
  check_gemv_x("quant_gemv_cuda", x, x_dtype, y_dtype, ldx);
  if (m == 0 || n == 0) return;
  constexpr int kWarps = 4;
  const unsigned grid = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  with_gemv_io(x_dtype, y_dtype, [&](auto tx, auto ty) {
    using TX = typename decltype(tx)::type;
    using TY = typename decltype(ty)::type;
    CYPRIS_QUANT_DISPATCH(w_dtype, "quant_gemv_cuda",
                          (quant_gemv_kernel<T, TX, TY><<<grid, 32 * kWarps, 0, stream>>>(
                              static_cast<const TX*>(x), static_cast<int>(m), k, ldx, static_cast<const uint8_t*>(w),
                              n, bias, static_cast<TY*>(y), ldy)));
  });
  CUDA_CHECK(cudaGetLastError());
}

void quant_gemv_grouped_cuda(const void* x, DType x_dtype, int64_t k, int64_t ldx, const GemmGroup* groups,
                             int64_t num_groups, DType w_dtype, int64_t n, void* y, DType y_dtype, int64_t ldy,
                             cudaStream_t stream) {
  check_row(w_dtype, k, "quant_gemv_grouped_cuda");
  check_gemv_x("quant_gemv_grouped_cuda", x, x_dtype, y_dtype, ldx);
  for (int64_t g = 0; g < num_groups; ++g) {
    CYPRIS_CHECK(groups[g].rows >= 1 && groups[g].rows <= kQuantGemvMaxRows && groups[g].first >= 0 && groups[g].w,
                 "quant_gemv_grouped_cuda: group {} has {} rows at {} (1 to {})", g, groups[g].rows, groups[g].first,
                 kQuantGemvMaxRows);
  }
  if (num_groups == 0 || n == 0) return;
  constexpr int kWarps = 4;
  for (int64_t g0 = 0; g0 < num_groups; g0 += kQuantGemvGroupsPerLaunch) {
    const int count = static_cast<int>(std::min<int64_t>(kQuantGemvGroupsPerLaunch, num_groups - g0));
    QuantGroupTable table{};
    for (int i = 0; i < count; ++i) table.g[i] = groups[g0 + i];
    const dim3 grid(static_cast<unsigned>((n + kWarps - 1) / kWarps), static_cast<unsigned>(count));
    with_gemv_io(x_dtype, y_dtype, [&](auto tx, auto ty) {
      using TX = typename decltype(tx)::type;
      using TY = typename decltype(ty)::type;
      CYPRIS_QUANT_DISPATCH(w_dtype, "quant_gemv_grouped_cuda",
                            (quant_gemv_grouped_kernel<T, TX, TY><<<grid, 32 * kWarps, 0, stream>>>(
                                static_cast<const TX*>(x), k, ldx, table, n, static_cast<TY*>(y), ldy)));
    });
    CUDA_CHECK(cudaGetLastError());
  }
}

void quant_dequant_rows_cuda(const void* w, DType w_dtype, int64_t row0, int64_t rows, int64_t k, void* out,
                             DType out_dtype, cudaStream_t stream) {
  check_row(w_dtype, k, "quant_dequant_rows_cuda");
  CYPRIS_CHECK(out_dtype == DType::F16 || out_dtype == DType::BF16,
               "quant_dequant_rows_cuda: the tile must be float16 or bfloat16, not {}", dtype_name(out_dtype));
  if (rows <= 0) return;
  const int64_t threads = rows * (k / 16);
  const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
  const auto* wb = static_cast<const uint8_t*>(w);
  if (out_dtype == DType::F16) {
    CYPRIS_QUANT_DISPATCH(w_dtype, "quant_dequant_rows_cuda",
                          (quant_dequant_kernel<T, __half><<<grid, 256, 0, stream>>>(
                              wb, k, nullptr, 0, row0, rows, static_cast<__half*>(out))));
  } else {
    CYPRIS_QUANT_DISPATCH(w_dtype, "quant_dequant_rows_cuda",
                          (quant_dequant_kernel<T, __nv_bfloat16><<<grid, 256, 0, stream>>>(
                              wb, k, nullptr, 0, row0, rows, static_cast<__nv_bfloat16*>(out))));
  }
  CUDA_CHECK(cudaGetLastError());
}

void quant_embedding_cuda(const int32_t* ids, int64_t num_tokens, const void* table, DType dtype, int64_t vocab,
                          int64_t hidden, void* out, DType out_dtype, cudaStream_t stream) {
  check_row(dtype, hidden, "quant_embedding_cuda");
  CYPRIS_CHECK(out_dtype == DType::F32 || out_dtype == DType::F16 || out_dtype == DType::BF16,
               "quant_embedding_cuda: rows of {} are not supported (float32, float16, bfloat16)", dtype_name(out_dtype));
  if (num_tokens <= 0) return;
  const int64_t threads = num_tokens * (hidden / 16);
  const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
  const auto* tb = static_cast<const uint8_t*>(table);
  if (out_dtype == DType::F32) {
    CYPRIS_QUANT_DISPATCH(dtype, "quant_embedding_cuda",
                          (quant_dequant_kernel<T, float><<<grid, 256, 0, stream>>>(tb, hidden, ids, vocab, 0, num_tokens,
                                                                                    static_cast<float*>(out))));
  } else if (out_dtype == DType::F16) {
    CYPRIS_QUANT_DISPATCH(dtype, "quant_embedding_cuda",
                          (quant_dequant_kernel<T, __half><<<grid, 256, 0, stream>>>(tb, hidden, ids, vocab, 0, num_tokens,
                                                                                     static_cast<__half*>(out))));
  } else {
    CYPRIS_QUANT_DISPATCH(dtype, "quant_embedding_cuda",
                          (quant_dequant_kernel<T, __nv_bfloat16><<<grid, 256, 0, stream>>>(
                              tb, hidden, ids, vocab, 0, num_tokens, static_cast<__nv_bfloat16*>(out))));
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
