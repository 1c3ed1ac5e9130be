// Cache writes and block copies. reshape_and_cache is a row scatter (the cache has no per-block
// reordering; the layout is the CPU's): grid (token, column chunks, K|V), each thread converting
// kVec = 8 consecutive elements, so a Llama-3-8B row (1024 wide) is one 128-thread block per token and
// tensor and a batch-1 write is one round of loads. Rows whose width, strides and base pointers allow it
// move as 16-byte (or 8/4-byte for narrow types) vectors; otherwise elements go one by one. Any io type
// (F32 / BF16 / F16) is converted to fp32 and stored as the cache type; fp8 uses kernels/common/fp8.h
// (x / scale, round to nearest even, saturating) so the bytes equal the CPU reference's.
// rotary_and_cache: the rotary of q and k fused with the K/V cache write, one launch instead of two
// (see the kernel).
// copy_blocks: one thread block per (cache, pair), copying 16 bytes per thread when the block size
// allows, so that every layer's K and V move in a single launch instead of 2 x layers x pairs memcpys;
// block copies and swaps move bytes and need no change for fp8 or 16-bit caches.
#include "kernels/cuda/cache_ops.h"

#include <algorithm>
#include <climits>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kVec = 8;               // elements per thread
constexpr int kCacheThreads = 128;

struct StoreF32 {
  using Elem = float;
  static __device__ __forceinline__ float store(float x, float) { return x; }
};
struct StoreF16 {
  using Elem = __half;
  static __device__ __forceinline__ __half store(float x, float) { return __float2half_rn(x); }
};
struct StoreBF16 {
  using Elem = __nv_bfloat16;
  static __device__ __forceinline__ __nv_bfloat16 store(float x, float) { return __float2bfloat16_rn(x); }
};
struct StoreE4M3 {
  using Elem = uint8_t;
  static __device__ __forceinline__ uint8_t store(float x, float scale) { return f32_to_fp8_e4m3(x / scale); }
};
struct StoreE5M2 {
  using Elem = uint8_t;
  static __device__ __forceinline__ uint8_t store(float x, float scale) { return f32_to_fp8_e5m2(x / scale); }
};

// kVec elements of T as one aligned word for vector loads / stores.
template <typename T>
struct alignas(sizeof(T) * kVec) VecOf {
  T v[kVec];
};

// grid (num_tokens, ceil(kv_width / (kCacheThreads * kVec)), 2): z = 0 writes K, z = 1 writes V.
// kVector: every row start is aligned to a whole VecOf<> of both types and kv_width % kVec == 0.
template <typename In, typename Store, bool kVector>
static __global__ void reshape_and_cache_kernel(const In* __restrict__ k, int64_t ldk, const In* __restrict__ v,
                                                int64_t ldv, const int64_t* __restrict__ slot_mapping,
                                                int64_t kv_width, typename Store::Elem* __restrict__ k_cache,
                                                typename Store::Elem* __restrict__ v_cache, int64_t num_slots,
                                                float k_scale, float v_scale) {
  using Out = typename Store::Elem;
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const bool is_v = blockIdx.z == 1;
  const In* src = is_v ? v + t * ldv : k + t * ldk;
  Out* dst = (is_v ? v_cache : k_cache) + slot * kv_width;
  const float scale = is_v ? v_scale : k_scale;
  const int64_t i0 = (static_cast<int64_t>(blockIdx.y) * kCacheThreads + threadIdx.x) * kVec;
  if (i0 >= kv_width) return;
  if constexpr (kVector) {
    const VecOf<In> x = *reinterpret_cast<const VecOf<In>*>(src + i0);
    VecOf<Out> y;
#pragma unroll
    for (int j = 0; j < kVec; ++j) y.v[j] = Store::store(to_float(x.v[j]), scale);
    *reinterpret_cast<VecOf<Out>*>(dst + i0) = y;
  } else {
    const int64_t n = min(static_cast<int64_t>(kVec), kv_width - i0);
    for (int64_t j = 0; j < n; ++j) dst[i0 + j] = Store::store(to_float(src[i0 + j]), scale);
  }
}

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename In, typename Store>
void launch_reshape_and_cache(const void* k, int64_t ldk, const void* v, int64_t ldv, int64_t num_tokens,
                              const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache,
                              int64_t num_slots, float k_scale, float v_scale, cudaStream_t stream) {
  using Out = typename Store::Elem;
  constexpr size_t in_vec = sizeof(In) * kVec, out_vec = sizeof(Out) * kVec;
  // Cache rows start at slot * kv_width, so kv_width % kVec == 0 plus an aligned base aligns them all.
  const bool vector = kv_width % kVec == 0 && ldk % kVec == 0 && ldv % kVec == 0 && aligned_to(k, in_vec) &&
                      aligned_to(v, in_vec) && aligned_to(k_cache, out_vec) && aligned_to(v_cache, out_vec);
  const dim3 grid(static_cast<unsigned>(num_tokens), ceil_div(kv_width, int64_t{kCacheThreads} * kVec), 2);
  const auto* ki = static_cast<const In*>(k);
  const auto* vi = static_cast<const In*>(v);
  auto* kc = static_cast<Out*>(k_cache);
  auto* vc = static_cast<Out*>(v_cache);
  if (vector) {
    reshape_and_cache_kernel<In, Store, true><<<grid, kCacheThreads, 0, stream>>>(ki, ldk, vi, ldv, slot_mapping,
                                                                                 kv_width, kc, vc, num_slots, k_scale,
                                                                                 v_scale);
  } else {
    reshape_and_cache_kernel<In, Store, false><<<grid, kCacheThreads, 0, stream>>>(ki, ldk, vi, ldv, slot_mapping,
                                                                                  kv_width, kc, vc, num_slots, k_scale,
                                                                                  v_scale);
  }
}

template <typename In>
void dispatch_cache_type(const void* k, int64_t ldk, const void* v, int64_t ldv, int64_t num_tokens,
                         const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache, int64_t num_slots,
                         DType cache_dtype, float k_scale, float v_scale, cudaStream_t stream) {
#define CYPRIS_RC_LAUNCH(S)                                                                                   \
  launch_reshape_and_cache<In, S>(k, ldk, v, ldv, num_tokens, slot_mapping, kv_width, k_cache, v_cache, num_slots, \
                                  k_scale, v_scale, stream)
  switch (cache_dtype) {
    case DType::F32: CYPRIS_RC_LAUNCH(StoreF32); break;
    case DType::F16: CYPRIS_RC_LAUNCH(StoreF16); break;
    case DType::BF16: CYPRIS_RC_LAUNCH(StoreBF16); break;
    case DType::F8E4M3: CYPRIS_RC_LAUNCH(StoreE4M3); break;
    case DType::F8E5M2: CYPRIS_RC_LAUNCH(StoreE5M2); break;
    default: CYPRIS_FAIL("reshape_and_cache_cuda: unsupported KV cache type {}", dtype_name(cache_dtype));
  }
#undef CYPRIS_RC_LAUNCH
}

// Rotary fused with the cache write. grid (num_tokens, Hq + 2 * Hkv): one block per head of one
// token. A q head is rotated in place; a k head is rotated in place and the rotated values (as
// rounded to the io type, so the cache equals rotary followed by reshape_and_cache) are stored at
// the token's slot; a v head is stored as it is. A position outside the table leaves q and k
// unrotated (as rotary_cuda does) and a slot outside the cache is not stored (as
// reshape_and_cache_cuda does).
template <typename T, typename Store>
static __global__ void rotary_and_cache_kernel(RotaryCacheArgs a, float k_scale, float v_scale) {
  using Out = typename Store::Elem;
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int pos = a.positions[t];
  const bool rotate = pos >= 0 && pos < a.max_pos;
  const int64_t slot = a.slot_mapping[t];
  const bool store = slot >= 0 && slot < a.num_slots;
  const int d = a.head_dim, half = a.rot_dim / 2;
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * d;
  const float* c = a.cos_sin + static_cast<int64_t>(rotate ? pos : 0) * a.rot_dim;
  const float* s = c + half;
  if (h < a.num_q_heads) {
    if (!rotate) return;
    T* head = static_cast<T*>(a.q) + t * a.ldq + static_cast<int64_t>(h) * d;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      float r1, r2;
      rotate_pair(to_float(head[i]), to_float(head[i + half]), c[i], s[i], &r1, &r2);
      head[i] = from_float<T>(r1);
      head[i + half] = from_float<T>(r2);
    }
    return;
  }
  if (h < a.num_q_heads + a.num_kv_heads) {
    const int kh = h - a.num_q_heads;
    T* head = static_cast<T*>(a.k) + t * a.ldk + static_cast<int64_t>(kh) * d;
    Out* dst = static_cast<Out*>(a.k_cache) + slot * kv_width + static_cast<int64_t>(kh) * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      if (rotate && i < 2 * half) {
        // Thread i < half owns the pair (i, i + half); the partner index is read, not written.
        if (i >= half) continue;
        float f1, f2;
        rotate_pair(to_float(head[i]), to_float(head[i + half]), c[i], s[i], &f1, &f2);
        const T r1 = from_float<T>(f1);
        const T r2 = from_float<T>(f2);
        head[i] = r1;
        head[i + half] = r2;
        if (store) {
          dst[i] = Store::store(to_float(r1), k_scale);
          dst[i + half] = Store::store(to_float(r2), k_scale);
        }
        continue;
      }
      if (store) dst[i] = Store::store(to_float(head[i]), k_scale);  // past the rotary part, or unrotated
    }
    return;
  }
  if (!store) return;
  const int vh = h - a.num_q_heads - a.num_kv_heads;
  const T* head = static_cast<const T*>(a.v) + t * a.ldv + static_cast<int64_t>(vh) * d;
  Out* dst = static_cast<Out*>(a.v_cache) + slot * kv_width + static_cast<int64_t>(vh) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) dst[i] = Store::store(to_float(head[i]), v_scale);
}

template <typename Word>
static __global__ void copy_blocks_kernel(const uint64_t* __restrict__ cache_ptrs, const int64_t* __restrict__ pairs,
                                          int64_t words_per_block) {
  Word* base = reinterpret_cast<Word*>(cache_ptrs[blockIdx.x]);
  const int64_t src = pairs[2 * static_cast<int64_t>(blockIdx.y)];
  const int64_t dst = pairs[2 * static_cast<int64_t>(blockIdx.y) + 1];
  const Word* s = base + src * words_per_block;
  Word* d = base + dst * words_per_block;
  for (int64_t i = threadIdx.x; i < words_per_block; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void reshape_and_cache_cuda(const void* k, int64_t ldk, const void* v, int64_t ldv, DType io_dtype, int64_t num_tokens,
                            const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache,
                            int64_t num_slots, cudaStream_t stream, DType cache_dtype, float k_scale, float v_scale) {
  CYPRIS_CHECK(kv_width > 0 && ldk >= kv_width && ldv >= kv_width, "reshape_and_cache_cuda: width {} ldk {} ldv {}",
               kv_width, ldk, ldv);
  const bool fp8 = cache_dtype == DType::F8E4M3 || cache_dtype == DType::F8E5M2;
  CYPRIS_CHECK(!fp8 || (k_scale > 0.0f && v_scale > 0.0f),
               "reshape_and_cache_cuda: fp8 scales must be positive (k_scale {}, v_scale {})", k_scale, v_scale);
  if (num_tokens <= 0) return;
  switch (io_dtype) {
    case DType::F32:
      dispatch_cache_type<float>(k, ldk, v, ldv, num_tokens, slot_mapping, kv_width, k_cache, v_cache, num_slots,
                                 cache_dtype, k_scale, v_scale, stream);
      break;
    case DType::F16:
      dispatch_cache_type<__half>(k, ldk, v, ldv, num_tokens, slot_mapping, kv_width, k_cache, v_cache, num_slots,
                                  cache_dtype, k_scale, v_scale, stream);
      break;
    case DType::BF16:
      dispatch_cache_type<__nv_bfloat16>(k, ldk, v, ldv, num_tokens, slot_mapping, kv_width, k_cache, v_cache,
                                         num_slots, cache_dtype, k_scale, v_scale, stream);
      break;
    default:
      CYPRIS_FAIL("reshape_and_cache_cuda: K/V must be float32, bfloat16 or float16, got {}", dtype_name(io_dtype));
  }
  CUDA_CHECK(cudaGetLastError());
}

void rotary_and_cache_cuda(const RotaryCacheArgs& a, DType io_dtype, DType cache_dtype, float k_scale, float v_scale,
                           cudaStream_t stream) {
  CYPRIS_CHECK(a.rot_dim > 0 && a.rot_dim % 2 == 0 && a.rot_dim <= a.head_dim && a.num_q_heads >= 0 &&
                   a.num_kv_heads > 0,
               "rotary_and_cache_cuda: rot_dim {} head_dim {} heads {} / {}", a.rot_dim, a.head_dim, a.num_q_heads,
               a.num_kv_heads);
  const bool fp8 = cache_dtype == DType::F8E4M3 || cache_dtype == DType::F8E5M2;
  CYPRIS_CHECK(!fp8 || (k_scale > 0.0f && v_scale > 0.0f),
               "rotary_and_cache_cuda: fp8 scales must be positive (k_scale {}, v_scale {})", k_scale, v_scale);
  if (a.num_tokens <= 0) return;
  CYPRIS_CHECK(a.num_tokens <= INT32_MAX, "rotary_and_cache_cuda: {} tokens", a.num_tokens);
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_q_heads + 2 * a.num_kv_heads));
  const int threads = std::min(128, std::max(32, (a.head_dim + 31) / 32 * 32));
  dispatch_float(io_dtype, "rotary_and_cache_cuda", [&](auto tag) {
    using T = decltype(tag);
    switch (cache_dtype) {
      case DType::F32: rotary_and_cache_kernel<T, StoreF32><<<grid, threads, 0, stream>>>(a, k_scale, v_scale); break;
      case DType::F16: rotary_and_cache_kernel<T, StoreF16><<<grid, threads, 0, stream>>>(a, k_scale, v_scale); break;
      case DType::BF16: rotary_and_cache_kernel<T, StoreBF16><<<grid, threads, 0, stream>>>(a, k_scale, v_scale); break;
      case DType::F8E4M3: rotary_and_cache_kernel<T, StoreE4M3><<<grid, threads, 0, stream>>>(a, k_scale, v_scale); break;
      case DType::F8E5M2: rotary_and_cache_kernel<T, StoreE5M2><<<grid, threads, 0, stream>>>(a, k_scale, v_scale); break;
      default: CYPRIS_FAIL("rotary_and_cache_cuda: unsupported KV cache type {}", dtype_name(cache_dtype));
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

void copy_blocks_cuda(const uint64_t* cache_ptrs, int num_caches, const int64_t* pairs, int64_t num_pairs,
                      int64_t block_bytes, cudaStream_t stream) {
  CYPRIS_CHECK(block_bytes > 0 && num_pairs <= 65535 && num_caches >= 0,
               "copy_blocks_cuda: {} pairs of {} bytes (at most 65535 pairs per call)", num_pairs, block_bytes);
  if (num_pairs <= 0 || num_caches == 0) return;
  const dim3 grid(static_cast<unsigned>(num_caches), static_cast<unsigned>(num_pairs));
  // cudaMalloc'd cache tensors are 256-byte aligned, so a block offset is 16-byte aligned whenever
  // block_bytes is a multiple of 16.
  if (block_bytes % 16 == 0) {
    copy_blocks_kernel<int4><<<grid, 256, 0, stream>>>(cache_ptrs, pairs, block_bytes / 16);
  } else if (block_bytes % 4 == 0) {
    copy_blocks_kernel<int><<<grid, 256, 0, stream>>>(cache_ptrs, pairs, block_bytes / 4);
  } else {
    copy_blocks_kernel<char><<<grid, 256, 0, stream>>>(cache_ptrs, pairs, block_bytes);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
