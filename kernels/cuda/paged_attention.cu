// Paged attention, two kernels chosen per batch:
//  * decode (every sequence has one new token): one thread block per (query head, token, split).
//    The key range is cut into splits of kPartition keys ("flash-decoding") when the grid would
//    otherwise be too small to fill the GPU; each split keeps an online softmax over chunks of
//    kChunk keys in shared memory, and a second kernel merges the splits' (max, sum, partial output).
//    Scores: one warp per key, lanes over head_dim; output: threads over head_dim, keys in order.
//  * prefill / mixed: flash-attention-style tiling, one thread block per (query tile of kBq rows,
//    head, sequence). K and V tiles of kBk keys are staged in shared memory and reused by the kBq
//    queries; an online softmax keeps the running max and sum per row, so the score matrix is
//    never materialised. Causality and the sliding window are masks on the score tile.
// Both run in fp32 on CUDA cores with any head_dim up to 256 (the fixtures use 8). GQA maps query
// head h to KV head h / (num_heads / num_kv_heads); blocks of the same group re-read K/V through
// L2 rather than sharing it in one block — the next step for speed, along with tensor cores.
// An fp8 cache (e4m3 / e5m2) is read through the Load policy: each element is decoded with
// kernels/common/fp8.h and multiplied by the layer's scale where it is loaded, so both kernels are
// templates on the cache type and otherwise unchanged (the fp32 instance does no extra work).
#include "kernels/cuda/paged_attention.h"

#include <algorithm>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kDecodeThreads = 128;
constexpr int kChunk = 128;        // keys scored per pass of the decode kernel
constexpr int kPartition = 512;    // keys per split when the key range is split
constexpr int kMaxSplits = 64;
constexpr int kMaxHeadDim = 256;
constexpr int kBq = 16;            // query rows per prefill tile
constexpr int kBk = 32;            // keys per prefill tile (one per lane in the softmax update)
constexpr int kPrefillThreads = 128;

struct LoadF32 {
  static __device__ __forceinline__ float load(const void* base, int64_t i, float) {
    return static_cast<const float*>(base)[i];
  }
};
struct LoadE4M3 {
  static __device__ __forceinline__ float load(const void* base, int64_t i, float scale) {
    return fp8_e4m3_to_f32(static_cast<const uint8_t*>(base)[i]) * scale;
  }
};
struct LoadE5M2 {
  static __device__ __forceinline__ float load(const void* base, int64_t i, float scale) {
    return fp8_e5m2_to_f32(static_cast<const uint8_t*>(base)[i]) * scale;
  }
};

__device__ __forceinline__ int find_seq(const int32_t* qsl, int num_seqs, int64_t t) {
  int lo = 0, hi = num_seqs - 1;  // last s with qsl[s] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (qsl[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ int64_t cache_offset(const int32_t* table, int block_size, int64_t kv_row, int g, int d,
                                                int64_t key) {
  return static_cast<int64_t>(table[key / block_size]) * block_size * kv_row + (key % block_size) * kv_row +
         static_cast<int64_t>(g) * d;
}

// grid (num_heads, num_tokens, num_splits). partial_* used when num_splits > 1.
template <typename Load>
static __global__ void decode_kernel(PagedAttentionCudaParams p, int num_splits, int64_t split_len,
                                     float* __restrict__ partial_o, float* __restrict__ partial_ml) {
  extern __shared__ int64_t decode_smem[];  // 8-byte aligned: the offsets come first
  int64_t* off_s = decode_smem;                                  // [kChunk]
  float* q_s = reinterpret_cast<float*>(off_s + kChunk);         // [head_dim]
  float* p_s = q_s + p.head_dim;                                 // [kChunk]
  __shared__ float scratch[32];
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int split = blockIdx.z;
  const int d = p.head_dim;
  const int group = p.num_heads / p.num_kv_heads;
  const int g = h / group;
  const int s = find_seq(p.query_start_loc, p.num_seqs, t);
  const int q_len = p.query_start_loc[s + 1] - p.query_start_loc[s];
  const int64_t pos = p.seq_lens[s] - q_len + (t - p.query_start_loc[s]);
  const int64_t lo = p.sliding_window > 0 ? max(int64_t{0}, pos - p.sliding_window + 1) : 0;
  int64_t k0 = lo, k1 = pos + 1;
  if (num_splits > 1) {
    k0 = lo + static_cast<int64_t>(split) * split_len;
    k1 = min(k1, k0 + split_len);
  }
  const int32_t* table = p.block_tables + s * p.max_blocks_per_seq;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) q_s[i] = static_cast<const float*>(p.q)[t * p.ldq + static_cast<int64_t>(h) * d + i];
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  float m = -INFINITY, l = 0.0f;
  float acc[kMaxHeadDim / kDecodeThreads] = {};
  for (int64_t c0 = k0; c0 < k1; c0 += kChunk) {
    const int n = static_cast<int>(min(static_cast<int64_t>(kChunk), k1 - c0));
    for (int j = threadIdx.x; j < n; j += blockDim.x) off_s[j] = cache_offset(table, p.block_size, kv_row, g, d, c0 + j);
    __syncthreads();
    for (int j = warp; j < n; j += nwarps) {
      const int64_t kr = off_s[j];
      float part = 0.0f;
      for (int i = lane; i < d; i += 32) part += q_s[i] * Load::load(p.k_cache, kr + i, p.k_scale);
      part = warp_sum(part);
      if (lane == 0) {
        const float sc = part * p.scale;
        p_s[j] = p.softcap > 0.0f ? p.softcap * tanhf(sc / p.softcap) : sc;
      }
    }
    __syncthreads();
    float cmax = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) cmax = fmaxf(cmax, p_s[j]);
    cmax = block_max(cmax, scratch);
    const float m_new = fmaxf(m, cmax);
    const float alpha = expf(m - m_new);  // m = -inf on the first chunk gives 0
    float csum = 0.0f;
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const float e = expf(p_s[j] - m_new);
      p_s[j] = e;
      csum += e;
    }
    csum = block_sum(csum, scratch);  // contains the barrier that publishes p_s
    l = l * alpha + csum;
    m = m_new;
#pragma unroll
    for (int r = 0; r < kMaxHeadDim / kDecodeThreads; ++r) {
      const int i = threadIdx.x + r * kDecodeThreads;
      if (i < d) {
        float a = acc[r] * alpha;
        for (int j = 0; j < n; ++j) a += p_s[j] * Load::load(p.v_cache, off_s[j] + i, p.v_scale);
        acc[r] = a;
      }
    }
    __syncthreads();  // p_s and off_s are rewritten by the next chunk
  }
  if (num_splits == 1) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxHeadDim / kDecodeThreads; ++r) {
      const int i = threadIdx.x + r * kDecodeThreads;
      if (i < d) static_cast<float*>(p.out)[t * p.ldo + static_cast<int64_t>(h) * d + i] = acc[r] * inv;
    }
    return;
  }
  const int64_t idx = (t * p.num_heads + h) * num_splits + split;
#pragma unroll
  for (int r = 0; r < kMaxHeadDim / kDecodeThreads; ++r) {
    const int i = threadIdx.x + r * kDecodeThreads;
    if (i < d) partial_o[idx * d + i] = acc[r];
  }
  if (threadIdx.x == 0) {
    partial_ml[2 * idx] = m;
    partial_ml[2 * idx + 1] = l;
  }
}

// grid (num_heads, num_tokens): merges the splits of one (token, head).
static __global__ void merge_splits_kernel(PagedAttentionCudaParams p, int num_splits,
                                           const float* __restrict__ partial_o, const float* __restrict__ partial_ml) {
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int64_t base = (t * p.num_heads + h) * num_splits;
  float mx = -INFINITY;
  for (int sp = 0; sp < num_splits; ++sp) mx = fmaxf(mx, partial_ml[2 * (base + sp)]);
  float total = 0.0f;
  for (int sp = 0; sp < num_splits; ++sp) {
    const float ms = partial_ml[2 * (base + sp)];
    if (ms != -INFINITY) total += partial_ml[2 * (base + sp) + 1] * expf(ms - mx);
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    float o = 0.0f;
    for (int sp = 0; sp < num_splits; ++sp) {
      const float ms = partial_ml[2 * (base + sp)];
      if (ms != -INFINITY) o += partial_o[(base + sp) * p.head_dim + i] * expf(ms - mx);
    }
    static_cast<float*>(p.out)[t * p.ldo + static_cast<int64_t>(h) * p.head_dim + i] = o * inv;
  }
}

// grid (query tiles, num_heads, num_seqs).
template <typename Load>
static __global__ void prefill_kernel(PagedAttentionCudaParams p) {
  extern __shared__ float smem[];
  const int d = p.head_dim;
  float* q_s = smem;                       // [kBq][d]
  float* k_s = q_s + kBq * d;              // [kBk][d + 1]
  float* v_s = k_s + kBk * (d + 1);        // [kBk][d]
  float* s_s = v_s + kBk * d;              // [kBq][kBk + 1]
  float* o_s = s_s + kBq * (kBk + 1);      // [kBq][d]
  float* m_s = o_s + kBq * d;              // [kBq]
  float* l_s = m_s + kBq;                  // [kBq]
  float* a_s = l_s + kBq;                  // [kBq]
  const int s = blockIdx.z;
  const int h = blockIdx.y;
  const int32_t qs0 = p.query_start_loc[s];
  const int32_t q_len = p.query_start_loc[s + 1] - qs0;
  const int r0 = blockIdx.x * kBq;
  if (r0 >= q_len) return;
  const int rows = min(kBq, q_len - r0);
  const int64_t pos0 = p.seq_lens[s] - q_len + r0;  // position of the tile's first row
  const int64_t pos_last = pos0 + rows - 1;
  const int64_t lo = p.sliding_window > 0 ? max(int64_t{0}, pos0 - p.sliding_window + 1) : 0;
  const int group = p.num_heads / p.num_kv_heads;
  const int g = h / group;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * d;
  const int32_t* table = p.block_tables + s * p.max_blocks_per_seq;

  for (int e = threadIdx.x; e < kBq * d; e += blockDim.x) {
    const int r = e / d, i = e % d;
    q_s[e] = r < rows ? static_cast<const float*>(p.q)[(qs0 + r0 + r) * p.ldq + static_cast<int64_t>(h) * d + i] * p.scale : 0.0f;
    o_s[e] = 0.0f;
  }
  if (threadIdx.x < kBq) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  for (int64_t kt = lo; kt <= pos_last; kt += kBk) {
    __syncthreads();  // the previous tile's k_s, v_s, s_s are no longer read
    for (int e = threadIdx.x; e < kBk * d; e += blockDim.x) {
      const int j = e / d, i = e % d;
      const int64_t key = kt + j;
      float kv = 0.0f, vv = 0.0f;
      if (key <= pos_last) {
        const int64_t off = cache_offset(table, p.block_size, kv_row, g, d, key) + i;
        kv = Load::load(p.k_cache, off, p.k_scale);
        vv = Load::load(p.v_cache, off, p.v_scale);
      }
      k_s[j * (d + 1) + i] = kv;
      v_s[e] = vv;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kBq * kBk; e += blockDim.x) {
      const int r = e / kBk, j = e % kBk;
      const int64_t key = kt + j;
      const int64_t pos = pos0 + r;
      const bool visible = r < rows && key <= pos && (p.sliding_window <= 0 || key > pos - p.sliding_window);
      float sc = -INFINITY;
      if (visible) {
        sc = 0.0f;
        const float* qr = q_s + r * d;
        const float* kr = k_s + j * (d + 1);
        for (int i = 0; i < d; ++i) sc += qr[i] * kr[i];
        if (p.softcap > 0.0f) sc = p.softcap * tanhf(sc / p.softcap);  // q was pre-scaled
      }
      s_s[r * (kBk + 1) + j] = sc;
    }
    __syncthreads();
    for (int r = warp; r < kBq; r += nwarps) {
      const float sc = s_s[r * (kBk + 1) + lane];
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, warp_max(sc));
      const float e = m_new == -INFINITY ? 0.0f : expf(sc - m_new);
      const float sum = warp_sum(e);
      s_s[r * (kBk + 1) + lane] = e;
      __syncwarp();
      if (lane == 0) {
        const float alpha = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
        a_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kBq * d; e += blockDim.x) {
      const int r = e / d, i = e % d;
      float o = o_s[e] * a_s[r];
      const float* pr = s_s + r * (kBk + 1);
#pragma unroll 8
      for (int j = 0; j < kBk; ++j) o += pr[j] * v_s[j * d + i];
      o_s[e] = o;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < rows * d; e += blockDim.x) {
    const int r = e / d, i = e % d;
    const float l = l_s[r];
    static_cast<float*>(p.out)[(qs0 + r0 + r) * p.ldo + static_cast<int64_t>(h) * d + i] = l > 0.0f ? o_s[e] / l : 0.0f;
  }
}

size_t prefill_smem_bytes(int d) {
  return sizeof(float) * (static_cast<size_t>(kBq) * d * 2 + kBk * (d + 1) + kBk * d + kBq * (kBk + 1) + 3 * kBq);
}

template <typename Load>
void launch_prefill(const PagedAttentionCudaParams& p, cudaStream_t stream) {
  const int max_q = p.max_query_len > 0 ? p.max_query_len : static_cast<int>(p.num_tokens);
  const size_t smem = prefill_smem_bytes(p.head_dim);
  // Set on every launch above the default 48 KiB (head_dim >= 128): the attribute belongs to the
  // current device, so a process-wide "already configured" flag left every other GPU of a tensor
  // parallel run at 48 KiB (the launch failed there), and the tp threads raced on it. A host-side
  // call, cheap, and legal during stream capture.
  if (smem > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<Load>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  }
  const dim3 grid((max_q + kBq - 1) / kBq, static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_seqs));
  prefill_kernel<Load><<<grid, kPrefillThreads, smem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

size_t decode_smem_bytes(int d) { return sizeof(float) * (d + kChunk) + sizeof(int64_t) * kChunk; }

bool all_decode(const PagedAttentionCudaParams& p) { return p.max_query_len == 1 || p.num_tokens == p.num_seqs; }

int num_splits_for(const PagedAttentionCudaParams& p) {
  if (!all_decode(p)) return 1;
  const int64_t max_ctx = p.max_seq_len > 0 ? p.max_seq_len : p.max_blocks_per_seq * p.block_size;
  const int64_t want = (max_ctx + kPartition - 1) / kPartition;
  if (want <= 1) return 1;
  // Split only while the grid is too small to fill the GPU (~132 SMs x a few blocks).
  const int64_t blocks = p.num_tokens * p.num_heads;
  if (blocks >= 1024) return 1;
  return static_cast<int>(std::min<int64_t>({want, kMaxSplits, std::max<int64_t>(1, 1024 / blocks)}));
}

// Keys per split. The split count is capped (kMaxSplits, grid size) below ceil(max_ctx / kPartition),
// so a split must cover max_ctx / splits keys, not kPartition: with fixed kPartition-key splits every
// key past splits * kPartition was silently dropped (e.g. 8 tokens x 32 heads -> 4 splits, so
// contexts over 2048 keys lost their tail). A whole number of kChunk passes.
int64_t split_len_for(const PagedAttentionCudaParams& p, int splits) {
  const int64_t max_ctx = p.max_seq_len > 0 ? p.max_seq_len : p.max_blocks_per_seq * p.block_size;
  const int64_t per = (max_ctx + splits - 1) / splits;
  return std::max<int64_t>(kChunk, (per + kChunk - 1) / kChunk * kChunk);
}

}  // namespace

size_t paged_attention_workspace_bytes(const PagedAttentionCudaParams& p) {
  const int splits = num_splits_for(p);
  if (splits <= 1) return 0;
  const size_t n = static_cast<size_t>(p.num_tokens) * p.num_heads * splits;
  return sizeof(float) * n * (static_cast<size_t>(p.head_dim) + 2);
}

void paged_attention_cuda(const PagedAttentionCudaParams& p, void* workspace, cudaStream_t stream) {
  CYPRIS_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
               "attention: {} query heads are not a multiple of {} KV heads", p.num_heads, p.num_kv_heads);
  CYPRIS_CHECK(p.head_dim > 0 && p.head_dim <= kMaxHeadDim, "attention: head_dim {} is not in [1, {}] on the GPU",
               p.head_dim, kMaxHeadDim);
  CYPRIS_CHECK(p.block_size > 0 && p.num_seqs >= 0, "attention: block_size {} num_seqs {}", p.block_size, p.num_seqs);
  CYPRIS_CHECK(p.cache_dtype == DType::F32 || p.cache_dtype == DType::F8E4M3 || p.cache_dtype == DType::F8E5M2,
               "attention: unsupported KV cache type {}", dtype_name(p.cache_dtype));
  if (p.num_tokens <= 0 || p.num_seqs == 0) return;
  if (all_decode(p)) {
    const int splits = num_splits_for(p);
    const int64_t split_len = split_len_for(p, splits);
    float* partial_o = nullptr;
    float* partial_ml = nullptr;
    if (splits > 1) {
      CYPRIS_CHECK(workspace != nullptr, "attention: the split-K workspace is missing");
      partial_o = static_cast<float*>(workspace);
      partial_ml = partial_o + static_cast<size_t>(p.num_tokens) * p.num_heads * splits * p.head_dim;
    }
    CYPRIS_CHECK(p.num_tokens <= 65535, "attention: {} decode tokens exceed the grid limit", p.num_tokens);
    const dim3 grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_tokens),
                    static_cast<unsigned>(splits));
    const size_t smem = decode_smem_bytes(p.head_dim);
    switch (p.cache_dtype) {
      case DType::F8E4M3:
        decode_kernel<LoadE4M3><<<grid, kDecodeThreads, smem, stream>>>(p, splits, split_len, partial_o, partial_ml);
        break;
      case DType::F8E5M2:
        decode_kernel<LoadE5M2><<<grid, kDecodeThreads, smem, stream>>>(p, splits, split_len, partial_o, partial_ml);
        break;
      default:
        decode_kernel<LoadF32><<<grid, kDecodeThreads, smem, stream>>>(p, splits, split_len, partial_o, partial_ml);
    }
    CUDA_CHECK(cudaGetLastError());
    if (splits > 1) {
      const dim3 mgrid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_tokens));
      merge_splits_kernel<<<mgrid, 128, 0, stream>>>(p, splits, partial_o, partial_ml);
      CUDA_CHECK(cudaGetLastError());
    }
    return;
  }
  switch (p.cache_dtype) {
    case DType::F8E4M3: launch_prefill<LoadE4M3>(p, stream); break;
    case DType::F8E5M2: launch_prefill<LoadE5M2>(p, stream); break;
    default: launch_prefill<LoadF32>(p, stream);
  }
}

}  // namespace cypris
