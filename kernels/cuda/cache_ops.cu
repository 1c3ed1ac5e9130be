// Cache writes and block copies. reshape_and_cache: one thread block per token copying its K and
// V rows (kv_width floats each) to the slot's row; the cache has no per-block reordering (the
// layout is the CPU's), so this is a row scatter. copy_blocks: one thread block per (cache, pair),
// copying 16 bytes per thread when the block size allows, so that every layer's K and V move in a
// single launch instead of 2 x layers x pairs memcpys. An fp8 cache is written by the same scatter
// with the conversion of kernels/common/fp8.h (x / scale, then round to nearest even, saturating),
// so the bytes equal the CPU reference's; block copies and swaps move bytes and need no change.
#include "kernels/cuda/cache_ops.h"

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris {
namespace {

struct StoreF32 {
  using Elem = float;
  static __device__ __forceinline__ float store(float x, float) { return x; }
};
struct StoreE4M3 {
  using Elem = uint8_t;
  static __device__ __forceinline__ uint8_t store(float x, float scale) { return f32_to_fp8_e4m3(x / scale); }
};
struct StoreE5M2 {
  using Elem = uint8_t;
  static __device__ __forceinline__ uint8_t store(float x, float scale) { return f32_to_fp8_e5m2(x / scale); }
};

template <typename Store>
static __global__ void reshape_and_cache_kernel(const float* __restrict__ k, int64_t ldk, const float* __restrict__ v,
                                                int64_t ldv, const int64_t* __restrict__ slot_mapping,
                                                int64_t kv_width, typename Store::Elem* __restrict__ k_cache,
                                                typename Store::Elem* __restrict__ v_cache, int64_t num_slots,
                                                float k_scale, float v_scale) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const float* ks = k + t * ldk;
  const float* vs = v + t * ldv;
  typename Store::Elem* kd = k_cache + slot * kv_width;
  typename Store::Elem* vd = v_cache + slot * kv_width;
  for (int64_t i = threadIdx.x; i < kv_width; i += blockDim.x) {
    kd[i] = Store::store(ks[i], k_scale);
    vd[i] = Store::store(vs[i], v_scale);
  }
}

template <typename Store>
void launch_reshape_and_cache(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t num_tokens,
                              const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache,
                              int64_t num_slots, float k_scale, float v_scale, cudaStream_t stream) {
  using Elem = typename Store::Elem;
  reshape_and_cache_kernel<Store><<<static_cast<unsigned>(num_tokens), 128, 0, stream>>>(
      k, ldk, v, ldv, slot_mapping, kv_width, static_cast<Elem*>(k_cache), static_cast<Elem*>(v_cache), num_slots,
      k_scale, v_scale);
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

void reshape_and_cache_cuda(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t num_tokens,
                            const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache,
                            int64_t num_slots, cudaStream_t stream, DType cache_dtype, float k_scale, float v_scale) {
  CYPRIS_CHECK(kv_width > 0 && ldk >= kv_width && ldv >= kv_width, "reshape_and_cache_cuda: width {} ldk {} ldv {}",
               kv_width, ldk, ldv);
  CYPRIS_CHECK(cache_dtype == DType::F32 || (k_scale > 0.0f && v_scale > 0.0f),
               "reshape_and_cache_cuda: fp8 scales must be positive (k_scale {}, v_scale {})", k_scale, v_scale);
  if (num_tokens <= 0) return;
  switch (cache_dtype) {
    case DType::F32:
      launch_reshape_and_cache<StoreF32>(k, ldk, v, ldv, num_tokens, slot_mapping, kv_width, k_cache, v_cache,
                                         num_slots, k_scale, v_scale, stream);
      break;
    case DType::F8E4M3:
      launch_reshape_and_cache<StoreE4M3>(k, ldk, v, ldv, num_tokens, slot_mapping, kv_width, k_cache, v_cache,
                                          num_slots, k_scale, v_scale, stream);
      break;
    case DType::F8E5M2:
      launch_reshape_and_cache<StoreE5M2>(k, ldk, v, ldv, num_tokens, slot_mapping, kv_width, k_cache, v_cache,
                                          num_slots, k_scale, v_scale, stream);
      break;
    default:
      CYPRIS_FAIL("reshape_and_cache_cuda: unsupported KV cache type {}", dtype_name(cache_dtype));
  }
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
