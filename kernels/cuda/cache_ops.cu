// Cache writes and block copies. reshape_and_cache: one thread block per token copying its K and
// V rows (kv_width floats each) to the slot's row; the cache has no per-block reordering (the
// layout is the CPU's), so this is a row scatter. copy_blocks: one thread block per (cache, pair),
// copying 16 bytes per thread when the block size allows, so that every layer's K and V move in a
// single launch instead of 2 x layers x pairs memcpys.
#include "kernels/cuda/cache_ops.h"

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris {
namespace {

static __global__ void reshape_and_cache_kernel(const float* __restrict__ k, int64_t ldk, const float* __restrict__ v,
                                                int64_t ldv, const int64_t* __restrict__ slot_mapping,
                                                int64_t kv_width, float* __restrict__ k_cache,
                                                float* __restrict__ v_cache, int64_t num_slots) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const float* ks = k + t * ldk;
  const float* vs = v + t * ldv;
  float* kd = k_cache + slot * kv_width;
  float* vd = v_cache + slot * kv_width;
  for (int64_t i = threadIdx.x; i < kv_width; i += blockDim.x) {
    kd[i] = ks[i];
    vd[i] = vs[i];
  }
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
                            const int64_t* slot_mapping, int64_t kv_width, float* k_cache, float* v_cache,
                            int64_t num_slots, cudaStream_t stream) {
  CYPRIS_CHECK(kv_width > 0 && ldk >= kv_width && ldv >= kv_width, "reshape_and_cache_cuda: width {} ldk {} ldv {}",
               kv_width, ldk, ldv);
  if (num_tokens <= 0) return;
  reshape_and_cache_kernel<<<static_cast<unsigned>(num_tokens), 128, 0, stream>>>(k, ldk, v, ldv, slot_mapping,
                                                                                 kv_width, k_cache, v_cache, num_slots);
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
