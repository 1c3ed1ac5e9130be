// Moving cached tokens with their keys rotated (--context-shift by rotation). Two launches, gather
// then scatter, through scratch buffers: a shift's moves overlap (a token moves into the slot of
// one that moves further down), and only a grid-wide barrier between every read and every write
// keeps that correct; a shift is rare (once per half window of generated tokens) and small, so the
// extra round trip through memory does not matter. Gather: one thread block per move, each thread
// one (head, pair j) of the rotation or one plain element, keys kept in fp32 so that a 16-bit or fp8
// cache is rounded once, on the scatter, exactly as the CPU reference does.
#include "kernels/cuda/kv_shift.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris {
namespace {

constexpr int kThreads = 128;

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static __device__ __forceinline__ float load(const float* p, int64_t i, float) { return p[i]; }
  static __device__ __forceinline__ void store(float* p, int64_t i, float x, float) { p[i] = x; }
};
template <>
struct Elem<__half> {
  static __device__ __forceinline__ float load(const __half* p, int64_t i, float) { return __half2float(p[i]); }
  static __device__ __forceinline__ void store(__half* p, int64_t i, float x, float) { p[i] = __float2half_rn(x); }
};
template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i, float) {
    return __bfloat162float(p[i]);
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float x, float) {
    p[i] = __float2bfloat16_rn(x);
  }
};
struct E4M3 {};
struct E5M2 {};
template <>
struct Elem<E4M3> {
  static __device__ __forceinline__ float load(const uint8_t* p, int64_t i, float s) { return fp8_e4m3_to_f32(p[i]) * s; }
  static __device__ __forceinline__ void store(uint8_t* p, int64_t i, float x, float s) {
    p[i] = f32_to_fp8_e4m3(x / s);
  }
};
template <>
struct Elem<E5M2> {
  static __device__ __forceinline__ float load(const uint8_t* p, int64_t i, float s) { return fp8_e5m2_to_f32(p[i]) * s; }
  static __device__ __forceinline__ void store(uint8_t* p, int64_t i, float x, float s) {
    p[i] = f32_to_fp8_e5m2(x / s);
  }
};
template <typename T>
struct Storage {
  using type = T;
};
template <>
struct Storage<E4M3> {
  using type = uint8_t;
};
template <>
struct Storage<E5M2> {
  using type = uint8_t;
};

// grid (num_moves): keys of move m read, rotated and kept in fp32; values copied as stored.
template <typename T>
static __global__ void gather_kernel(const typename Storage<T>::type* __restrict__ k_cache,
                                     const typename Storage<T>::type* __restrict__ v_cache,
                                     const int64_t* __restrict__ src_dst, const float* __restrict__ cos_sin,
                                     int num_kv_heads, int head_dim, int rot_dim, float k_scale,
                                     float* __restrict__ keys, typename Storage<T>::type* __restrict__ values) {
  const int64_t m = blockIdx.x;
  const int64_t width = static_cast<int64_t>(num_kv_heads) * head_dim;
  const int64_t src = src_dst[2 * m] * width;
  float* key = keys + m * width;
  const int half = rot_dim / 2;
  for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
    values[m * width + e] = v_cache[src + e];
    const int d = static_cast<int>(e % head_dim);
    if (d >= rot_dim) {
      key[e] = Elem<T>::load(k_cache, src + e, k_scale);
    } else if (d < half) {
      // This thread owns the pair (d, d + half) of its head.
      const float x1 = Elem<T>::load(k_cache, src + e, k_scale);
      const float x2 = Elem<T>::load(k_cache, src + e + half, k_scale);
      const float c = cos_sin[m * rot_dim + d], s = cos_sin[m * rot_dim + half + d];
      key[e] = x1 * c - x2 * s;
      key[e + half] = x2 * c + x1 * s;
    }
  }
}

// grid (num_moves): the gathered key (rounded to the cache type) and value stored at the destination.
template <typename T>
static __global__ void scatter_kernel(typename Storage<T>::type* __restrict__ k_cache,
                                      typename Storage<T>::type* __restrict__ v_cache,
                                      const int64_t* __restrict__ src_dst, int64_t width, float k_scale,
                                      const float* __restrict__ keys,
                                      const typename Storage<T>::type* __restrict__ values) {
  const int64_t m = blockIdx.x;
  const int64_t dst = src_dst[2 * m + 1] * width;
  for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
    Elem<T>::store(k_cache, dst + e, keys[m * width + e], k_scale);
    v_cache[dst + e] = values[m * width + e];
  }
}

template <typename T>
void launch(void* k_cache, void* v_cache, int num_kv_heads, int head_dim, int rot_dim, const int64_t* src_dst,
            int64_t num_moves, const float* cos_sin, float k_scale, float* keys, void* values, cudaStream_t stream) {
  using S = typename Storage<T>::type;
  const int64_t width = static_cast<int64_t>(num_kv_heads) * head_dim;
  for (int64_t m0 = 0; m0 < num_moves; m0 += 65535) {
    const int64_t n = num_moves - m0 < 65535 ? num_moves - m0 : 65535;
    gather_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        static_cast<const S*>(k_cache), static_cast<const S*>(v_cache), src_dst + 2 * m0,
        cos_sin == nullptr ? nullptr : cos_sin + m0 * rot_dim, num_kv_heads, head_dim, rot_dim, k_scale,
        keys + m0 * width, static_cast<S*>(values) + m0 * width);
    CUDA_CHECK(cudaGetLastError());
  }
  for (int64_t m0 = 0; m0 < num_moves; m0 += 65535) {
    const int64_t n = num_moves - m0 < 65535 ? num_moves - m0 : 65535;
    scatter_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        static_cast<S*>(k_cache), static_cast<S*>(v_cache), src_dst + 2 * m0, width, k_scale, keys + m0 * width,
        static_cast<const S*>(values) + m0 * width);
    CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void move_kv_slots_cuda(void* k_cache, void* v_cache, DType cache_dtype, int num_kv_heads, int head_dim, int rot_dim,
                        const int64_t* src_dst, int64_t num_moves, const float* cos_sin, float k_scale,
                        float* key_scratch, void* value_scratch, cudaStream_t stream) {
  if (cos_sin == nullptr) rot_dim = 0;
  CYPRIS_CHECK(num_kv_heads > 0 && head_dim > 0 && rot_dim >= 0 && rot_dim <= head_dim && rot_dim % 2 == 0,
               "move_kv_slots_cuda: rot_dim {} must be even and at most head_dim {}", rot_dim, head_dim);
  if (num_moves <= 0) return;
  switch (cache_dtype) {
    case DType::F32:
      launch<float>(k_cache, v_cache, num_kv_heads, head_dim, rot_dim, src_dst, num_moves, cos_sin, k_scale,
                    key_scratch, value_scratch, stream);
      break;
    case DType::F16:
      launch<__half>(k_cache, v_cache, num_kv_heads, head_dim, rot_dim, src_dst, num_moves, cos_sin, k_scale,
                     key_scratch, value_scratch, stream);
      break;
    case DType::BF16:
      launch<__nv_bfloat16>(k_cache, v_cache, num_kv_heads, head_dim, rot_dim, src_dst, num_moves, cos_sin, k_scale,
                            key_scratch, value_scratch, stream);
      break;
    case DType::F8E4M3:
      CYPRIS_CHECK(k_scale > 0.0f, "move_kv_slots_cuda: k_scale {} must be positive", k_scale);
      launch<E4M3>(k_cache, v_cache, num_kv_heads, head_dim, rot_dim, src_dst, num_moves, cos_sin, k_scale,
                   key_scratch, value_scratch, stream);
      break;
    case DType::F8E5M2:
      CYPRIS_CHECK(k_scale > 0.0f, "move_kv_slots_cuda: k_scale {} must be positive", k_scale);
      launch<E5M2>(k_cache, v_cache, num_kv_heads, head_dim, rot_dim, src_dst, num_moves, cos_sin, k_scale,
                   key_scratch, value_scratch, stream);
      break;
    default:
      CYPRIS_FAIL("move_kv_slots_cuda: unsupported cache type {}", dtype_name(cache_dtype));
  }
}

}  // namespace cypris
