// Device-side helpers shared by the kernel files of kernels/cuda/ (conversions to and from fp32,
// warp and block reductions). Included only by .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/common/dtype.h"
#include "engine/common/error.h"

namespace cypris {
namespace cuda_detail {

// Activations on the GPU are F32, F16 or BF16 (the model dtype). dispatch_float calls f with a
// value of the matching CUDA element type (float, __half, __nv_bfloat16), so a launcher writes
// its launch once: `dispatch_float(t, "what", [&](auto tag) { using T = decltype(tag); ... });`
template <typename F>
void dispatch_float(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::F32:
      f(float{});
      return;
    case DType::F16:
      f(__half{});
      return;
    case DType::BF16:
      f(__nv_bfloat16{});
      return;
    default:
      CYPRIS_FAIL("{}: element type {} is not supported (float32, float16, bfloat16)", what, dtype_name(t));
  }
}

// The rotary of one (x1, x2) pair: (x1 c - x2 s, x2 c + x1 s), with explicit round-to-nearest
// products and sums (no FMA contraction), so every kernel that rotates gets the same bits as the
// CPU reference (rotary_cpu), fused or not.
__device__ __forceinline__ void rotate_pair(float x1, float x2, float c, float s, float* r1, float* r2) {
  *r1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  *r2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Eight consecutive elements as fp32 (one 16-byte load for 16-bit types, two for fp32); p must be
// 16-byte aligned.
__device__ __forceinline__ void load8(const float* p, float* out) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}
// Eight 16-bit values (one 16-byte word) as fp32; the pointer type only picks the format.
__device__ __forceinline__ void unpack8(const uint4& raw, const __half*, float* out) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void unpack8(const uint4& raw, const __nv_bfloat16*, float* out) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __half* p, float* out) {
  unpack8(*reinterpret_cast<const uint4*>(p), p, out);
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* out) {
  unpack8(*reinterpret_cast<const uint4*>(p), p, out);
}
// The same through the read-only cache (__ldg), for data no thread of the kernel writes (weights).
template <typename T>
__device__ __forceinline__ void load8_ldg(const T* p, float* out) {
  unpack8(__ldg(reinterpret_cast<const uint4*>(p)), p, out);
}

// Eight fp32 values stored as T at p (16-byte aligned), rounded to nearest even.
__device__ __forceinline__ void store8(float* p, const float* v) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8(__half* p, const float* v) {
  uint4 raw;
  __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float* v) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// Whether 8-wide vector access works for rows of `cols` elements with row stride ld at p.
inline bool vec8_ok(const void* p, int64_t cols, int64_t ld) {
  return cols % 8 == 0 && ld % 8 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` must hold 32 floats; the call contains __syncthreads().
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  float r = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  float r = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(r);
}

inline unsigned int ceil_div(int64_t a, int64_t b) { return static_cast<unsigned int>((a + b - 1) / b); }

}  // namespace cuda_detail
}  // namespace cypris
