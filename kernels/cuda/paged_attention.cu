// Paged attention, three kernels chosen per batch:
//  * GQA decode (every sequence has one new token, head_dim 64/80/96/128/256, aligned cache): one
//    thread block per (KV head, sequence, split) computing up to kMaxHeadsPerBlock query heads of that
//    KV head, so each K/V row is read once per GQA group. A group of TPK lanes owns one key at a time
//    and each lane 8 consecutive elements of it (one 16-byte load for 16-bit caches, two for fp32, 8 bytes
//    for fp8); the query rows sit in registers, scores of a chunk of keys go to shared memory for an
//    online softmax, and the P.V accumulators stay in registers until a final reduction over the key
//    groups. The key range of each sequence is cut into `splits` equal parts ("flash-decoding"), the
//    count chosen on the host so the grid fills the SMs even at batch 1; the parts are cut per sequence
//    inside the kernel, so a CUDA graph captured at one length stays correct (and busy) at any other.
//    merge_splits_kernel combines the parts' (max, sum, unnormalised output).
//  * scalar decode: the same split scheme, one block per query head, any head_dim up to 256 (the tiny
//    fixtures use 8), for what the GQA kernel does not take.
//  * prefill / mixed: flash-attention-style tiling, one thread block per (query tile of kBq rows,
//    head, sequence). K and V tiles of kBk keys are staged in shared memory and reused by the kBq
//    queries; an online softmax keeps the running max and sum per row, so the score matrix is
//    never materialised. Causality and the sliding window are masks on the score tile. This is the
//    fallback: prefill with q and cache of the same 16-bit type and head_dim 64/80/96/128/256 runs the
//    tensor-core kernel of paged_attention_tc.cu (switch CYPRIS_ATTN_TC_PREFILL).
// All accumulate in fp32. q and out are F32, BF16 or F16 (io_dtype, read and written through
// load_io / store_io); the cache is F32, F16, BF16 or fp8 (e4m3 / e5m2, decoded with kernels/common/fp8.h
// and multiplied by the layer's scale where it is loaded), a template parameter of every kernel.
#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <mutex>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/paged_attention_tc.cuh"

namespace cypris {
namespace {

using namespace cuda_detail;

constexpr int kDecodeThreads = 128;
constexpr int kChunk = 128;        // keys scored per pass of the scalar decode kernel
constexpr int kMaxSplits = 64;
constexpr int kMinKeysPerSplit = 8;
constexpr int kMaxHeadDim = 256;
constexpr int kBq = 16;            // query rows per prefill tile
constexpr int kBk = 32;            // keys per prefill tile (one per lane in the softmax update)
constexpr int kPrefillThreads = 128;

constexpr int kGqaThreads = 128;
constexpr int kMaxHeadsPerBlock = 8;  // query heads of one KV head per GQA decode block
constexpr int kGqaChunk = 64;         // keys per pass of the GQA decode kernel

// ---- q / out in io_dtype -------------------------------------------------------------------------

__device__ __forceinline__ float load_io(const void* base, int64_t i, DType t) {
  if (t == DType::BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  if (t == DType::F16) return __half2float(static_cast<const __half*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

__device__ __forceinline__ void store_io(void* base, int64_t i, float x, DType t) {
  if (t == DType::BF16) {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
  } else if (t == DType::F16) {
    static_cast<__half*>(base)[i] = __float2half_rn(x);
  } else {
    static_cast<float*>(base)[i] = x;
  }
}

// ---- cache element types ------------------------------------------------------------------------
// load(base, i, scale): element i as fp32. load8(row, x, scale): the 8 elements at `row`, which is
// aligned to 8 elements (the GQA kernel's vector path).

struct LoadF32 {
  using Elem = float;
  static __device__ __forceinline__ float load(const void* base, int64_t i, float) {
    return static_cast<const float*>(base)[i];
  }
  static __device__ __forceinline__ void load8(const Elem* row, float (&x)[8], float) {
    const float4 a = reinterpret_cast<const float4*>(row)[0];
    const float4 b = reinterpret_cast<const float4*>(row)[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  }
};
struct LoadF16 {
  using Elem = __half;
  static __device__ __forceinline__ float load(const void* base, int64_t i, float) {
    return __half2float(static_cast<const __half*>(base)[i]);
  }
  static __device__ __forceinline__ void load8(const Elem* row, float (&x)[8], float) {
    const uint4 u = *reinterpret_cast<const uint4*>(row);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      __half2 h;
      memcpy(&h, &w[j], 4);
      const float2 f = __half22float2(h);
      x[2 * j] = f.x, x[2 * j + 1] = f.y;
    }
  }
};
struct LoadBF16 {
  using Elem = __nv_bfloat16;
  static __device__ __forceinline__ float load(const void* base, int64_t i, float) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
  static __device__ __forceinline__ void load8(const Elem* row, float (&x)[8], float) {
    const uint4 u = *reinterpret_cast<const uint4*>(row);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // bf16 -> fp32 is a 16-bit shift.
      x[2 * j] = __uint_as_float(w[j] << 16);
      x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
  }
};
template <bool kE4M3>
struct LoadFp8 {
  using Elem = uint8_t;
  static __device__ __forceinline__ float decode(uint8_t c) { return kE4M3 ? fp8_e4m3_to_f32(c) : fp8_e5m2_to_f32(c); }
  static __device__ __forceinline__ float load(const void* base, int64_t i, float scale) {
    return decode(static_cast<const uint8_t*>(base)[i]) * scale;
  }
  static __device__ __forceinline__ void load8(const Elem* row, float (&x)[8], float scale) {
    const uint2 u = *reinterpret_cast<const uint2*>(row);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      x[j] = decode(static_cast<uint8_t>(u.x >> (8 * j))) * scale;
      x[4 + j] = decode(static_cast<uint8_t>(u.y >> (8 * j))) * scale;
    }
  }
};
using LoadE4M3 = LoadFp8<true>;
using LoadE5M2 = LoadFp8<false>;

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

// The keys [k0, k1) that split `split` of `num_splits` covers for decode token t: the visible range
// (lo, pos] of the token cut into equal parts (some empty when the range is short).
struct DecodeRange {
  int s;
  int64_t k0, k1;
};
__device__ __forceinline__ DecodeRange decode_range(const PagedAttentionCudaParams& p, int64_t t, int split,
                                                    int num_splits) {
  DecodeRange r;
  r.s = find_seq(p.query_start_loc, p.num_seqs, t);
  const int q_len = p.query_start_loc[r.s + 1] - p.query_start_loc[r.s];
  const int64_t pos = p.seq_lens[r.s] - q_len + (t - p.query_start_loc[r.s]);
  const int64_t lo = p.sliding_window > 0 ? max(int64_t{0}, pos - p.sliding_window + 1) : 0;
  const int64_t per = (pos + 1 - lo + num_splits - 1) / num_splits;
  r.k0 = min(pos + 1, lo + static_cast<int64_t>(split) * per);
  r.k1 = min(pos + 1, r.k0 + per);
  return r;
}

__device__ __forceinline__ float cap_score(float sc, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(sc / softcap) : sc;
}

// ---- GQA decode ---------------------------------------------------------------------------------

template <int D>
struct GqaShape {
  static constexpr int kGroups = D / 8;  // 8-element groups per row
  // Lanes per key: the power of two that covers a row (idle lanes when D / 8 is not one, e.g. 80).
  static constexpr int kTpk = kGroups > 16 ? 32 : kGroups > 8 ? 16 : kGroups > 4 ? 8 : 4;
  static constexpr int kNc = (kGroups + kTpk - 1) / kTpk;     // 8-element groups per lane
  static constexpr int kKeyGroups = kGqaThreads / kTpk;       // keys in flight per block
  static_assert(D % 8 == 0 && kTpk <= 32, "GQA decode: head_dim must be a multiple of 8");
};

// grid (num_kv_heads * head_chunks, num_tokens, num_splits); dynamic shared memory
// kKeyGroups * heads_per_block * D floats. partial_* used when num_splits > 1.
template <int D, typename Load>
static __global__ void __launch_bounds__(kGqaThreads, 1)
    gqa_decode_kernel(PagedAttentionCudaParams p, int head_chunks, int num_splits, float* __restrict__ partial_o,
                      float* __restrict__ partial_ml) {
  using S = GqaShape<D>;
  using Elem = typename Load::Elem;
  extern __shared__ float gqa_red[];                          // [kKeyGroups][hb][D]
  __shared__ float s_s[kMaxHeadsPerBlock * kGqaChunk];        // scores, then probabilities
  __shared__ int64_t off_s[kGqaChunk];                        // cache offsets of the chunk's keys
  __shared__ float m_s[kMaxHeadsPerBlock], l_s[kMaxHeadsPerBlock], a_s[kMaxHeadsPerBlock];

  const int group = p.num_heads / p.num_kv_heads;
  const int g = blockIdx.x / head_chunks;
  const int hc = blockIdx.x % head_chunks;
  const int h0 = g * group + hc * kMaxHeadsPerBlock;
  const int hb = min(kMaxHeadsPerBlock, group - hc * kMaxHeadsPerBlock);
  const int64_t t = blockIdx.y;
  const int split = blockIdx.z;
  const DecodeRange r = decode_range(p, t, split, num_splits);
  const int32_t* table = p.block_tables + static_cast<int64_t>(r.s) * p.max_blocks_per_seq;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * D;
  const Elem* kc = static_cast<const Elem*>(p.k_cache);
  const Elem* vc = static_cast<const Elem*>(p.v_cache);
  const int kg = threadIdx.x / S::kTpk;
  const int li = threadIdx.x % S::kTpk;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  float q[kMaxHeadsPerBlock][S::kNc][8];
  float acc[kMaxHeadsPerBlock][S::kNc][8];
#pragma unroll
  for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
#pragma unroll
    for (int c = 0; c < S::kNc; ++c) {
      const int grp = c * S::kTpk + li;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        q[h][c][e] = h < hb && grp < S::kGroups
                         ? load_io(p.q, t * p.ldq + static_cast<int64_t>(h0 + h) * D + grp * 8 + e, p.io_dtype) * p.scale
                         : 0.0f;
        acc[h][c][e] = 0.0f;
      }
    }
  }
  if (threadIdx.x < kMaxHeadsPerBlock) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }

  for (int64_t c0 = r.k0; c0 < r.k1; c0 += kGqaChunk) {
    const int n = static_cast<int>(min(static_cast<int64_t>(kGqaChunk), r.k1 - c0));
    for (int j = threadIdx.x; j < n; j += kGqaThreads) off_s[j] = cache_offset(table, p.block_size, kv_row, g, D, c0 + j);
    __syncthreads();  // off_s published; the previous chunk's s_s reads are done
    // Scores: every lane runs the same number of iterations, so the shuffles see the full warp.
    for (int jb = 0; jb < n; jb += S::kKeyGroups) {
      const int j = jb + kg;
      const bool valid = j < n;
      float k[S::kNc][8];
#pragma unroll
      for (int c = 0; c < S::kNc; ++c) {
        const int grp = c * S::kTpk + li;
        if (valid && grp < S::kGroups) {
          Load::load8(kc + off_s[j] + grp * 8, k[c], p.k_scale);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) k[c][e] = 0.0f;
        }
      }
#pragma unroll
      for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
        if (h < hb) {
          float part = 0.0f;
#pragma unroll
          for (int c = 0; c < S::kNc; ++c) {
#pragma unroll
            for (int e = 0; e < 8; ++e) part += q[h][c][e] * k[c][e];
          }
#pragma unroll
          for (int o = S::kTpk / 2; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
          if (valid && li == 0) s_s[h * kGqaChunk + j] = cap_score(part, p.softcap);
        }
      }
    }
    __syncthreads();
    // Online softmax: one warp per head, two keys per lane.
    for (int h = warp; h < hb; h += kGqaThreads / 32) {
      float* sr = s_s + h * kGqaChunk;
      const float x0 = lane < n ? sr[lane] : -INFINITY;
      const float x1 = lane + 32 < n ? sr[lane + 32] : -INFINITY;
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1)));
      const float e0 = lane < n ? expf(x0 - m_new) : 0.0f;
      const float e1 = lane + 32 < n ? expf(x1 - m_new) : 0.0f;
      if (lane < n) sr[lane] = e0;
      if (lane + 32 < n) sr[lane + 32] = e1;
      const float sum = warp_sum(e0 + e1);
      __syncwarp();  // every lane has read m_s[h] before lane 0 rewrites it
      if (lane == 0) {
        const float alpha = expf(m_old - m_new);  // 0 on the first chunk (m_old = -inf)
        a_s[h] = alpha;
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
    // P.V into the per-lane accumulators.
#pragma unroll
    for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
      if (h < hb) {
        const float a = a_s[h];
#pragma unroll
        for (int c = 0; c < S::kNc; ++c) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[h][c][e] *= a;
        }
      }
    }
    for (int j = kg; j < n; j += S::kKeyGroups) {
      float v[S::kNc][8];
#pragma unroll
      for (int c = 0; c < S::kNc; ++c) {
        const int grp = c * S::kTpk + li;
        if (grp < S::kGroups) {
          Load::load8(vc + off_s[j] + grp * 8, v[c], p.v_scale);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) v[c][e] = 0.0f;
        }
      }
#pragma unroll
      for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
        if (h < hb) {
          const float pj = s_s[h * kGqaChunk + j];
#pragma unroll
          for (int c = 0; c < S::kNc; ++c) {
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][c][e] += pj * v[c][e];
          }
        }
      }
    }
    __syncthreads();  // off_s and s_s are rewritten by the next chunk
  }

  // Sum the key groups' accumulators.
#pragma unroll
  for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
    if (h < hb) {
#pragma unroll
      for (int c = 0; c < S::kNc; ++c) {
        const int grp = c * S::kTpk + li;
        if (grp < S::kGroups) {
          float* dst = gqa_red + (kg * hb + h) * D + grp * 8;
#pragma unroll
          for (int e = 0; e < 8; ++e) dst[e] = acc[h][c][e];
        }
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < hb * D; e += kGqaThreads) {
    const int h = e / D, i = e % D;
    float o = 0.0f;
    for (int k2 = 0; k2 < S::kKeyGroups; ++k2) o += gqa_red[(k2 * hb + h) * D + i];
    const int head = h0 + h;
    if (num_splits == 1) {
      const float l = l_s[h];
      store_io(p.out, t * p.ldo + static_cast<int64_t>(head) * D + i, l > 0.0f ? o / l : 0.0f, p.io_dtype);
    } else {
      const int64_t idx = (t * p.num_heads + head) * num_splits + split;
      partial_o[idx * D + i] = o;
      if (i == 0) {
        partial_ml[2 * idx] = m_s[h];
        partial_ml[2 * idx + 1] = l_s[h];
      }
    }
  }
}

// ---- scalar decode ------------------------------------------------------------------------------

// grid (num_heads, num_tokens, num_splits). partial_* used when num_splits > 1.
template <typename Load>
static __global__ void decode_kernel(PagedAttentionCudaParams p, int num_splits, float* __restrict__ partial_o,
                                     float* __restrict__ partial_ml) {
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
  const DecodeRange r = decode_range(p, t, split, num_splits);
  const int64_t k0 = r.k0, k1 = r.k1;
  const int32_t* table = p.block_tables + static_cast<int64_t>(r.s) * p.max_blocks_per_seq;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    q_s[i] = load_io(p.q, t * p.ldq + static_cast<int64_t>(h) * d + i, p.io_dtype);
  }
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
      if (lane == 0) p_s[j] = cap_score(part * p.scale, p.softcap);
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
    for (int rr = 0; rr < kMaxHeadDim / kDecodeThreads; ++rr) {
      const int i = threadIdx.x + rr * kDecodeThreads;
      if (i < d) {
        float a = acc[rr] * alpha;
        for (int j = 0; j < n; ++j) a += p_s[j] * Load::load(p.v_cache, off_s[j] + i, p.v_scale);
        acc[rr] = a;
      }
    }
    __syncthreads();  // p_s and off_s are rewritten by the next chunk
  }
  if (num_splits == 1) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int rr = 0; rr < kMaxHeadDim / kDecodeThreads; ++rr) {
      const int i = threadIdx.x + rr * kDecodeThreads;
      if (i < d) store_io(p.out, t * p.ldo + static_cast<int64_t>(h) * d + i, acc[rr] * inv, p.io_dtype);
    }
    return;
  }
  const int64_t idx = (t * p.num_heads + h) * num_splits + split;
#pragma unroll
  for (int rr = 0; rr < kMaxHeadDim / kDecodeThreads; ++rr) {
    const int i = threadIdx.x + rr * kDecodeThreads;
    if (i < d) partial_o[idx * d + i] = acc[rr];
  }
  if (threadIdx.x == 0) {
    partial_ml[2 * idx] = m;
    partial_ml[2 * idx + 1] = l;
  }
}

// grid (num_heads, num_tokens): merges the splits of one (token, head). The first warp turns the
// splits' (max, sum) into one weight each (exp(m_s - m) / total, 0 for an empty split) in shared
// memory; then every thread sums its output elements over the splits with the weights known, so
// the partial-output loads are independent and in flight together (the dependent per-split
// max/exp chain made this a latency-bound 11 µs kernel at batch 1).
static __global__ void merge_splits_kernel(PagedAttentionCudaParams p, int num_splits,
                                           const float* __restrict__ partial_o, const float* __restrict__ partial_ml) {
  __shared__ float weight[kMaxSplits];
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int64_t base = (t * p.num_heads + h) * num_splits;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float m[2], l[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int sp = lane + 32 * j;
      m[j] = sp < num_splits ? partial_ml[2 * (base + sp)] : -INFINITY;
      l[j] = sp < num_splits ? partial_ml[2 * (base + sp) + 1] : 0.0f;
    }
    const float mx = warp_max(fmaxf(m[0], m[1]));
    float e[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) e[j] = m[j] == -INFINITY ? 0.0f : expf(m[j] - mx);
    const float total = warp_sum(l[0] * e[0] + l[1] * e[1]);
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int sp = lane + 32 * j;
      if (sp < num_splits) weight[sp] = e[j] * inv;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
    const float* po = partial_o + base * p.head_dim + i;
    float o = 0.0f;
#pragma unroll 8
    for (int sp = 0; sp < num_splits; ++sp) o += po[static_cast<int64_t>(sp) * p.head_dim] * weight[sp];
    store_io(p.out, t * p.ldo + static_cast<int64_t>(h) * p.head_dim + i, o, p.io_dtype);
  }
}

// ---- scalar prefill -----------------------------------------------------------------------------

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
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;

  for (int e = threadIdx.x; e < kBq * d; e += blockDim.x) {
    const int r = e / d, i = e % d;
    q_s[e] = r < rows
                 ? load_io(p.q, (qs0 + r0 + r) * p.ldq + static_cast<int64_t>(h) * d + i, p.io_dtype) * p.scale
                 : 0.0f;
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
        sc = cap_score(sc, p.softcap);  // q was pre-scaled
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
    store_io(p.out, (qs0 + r0 + r) * p.ldo + static_cast<int64_t>(h) * d + i, l > 0.0f ? o_s[e] / l : 0.0f,
             p.io_dtype);
  }
}

// ---- host side ----------------------------------------------------------------------------------

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

// Multiprocessors of the current device, asked once per device (tensor-parallel threads each have
// their own current device).
int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static int counts[kMaxDevices] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  int& c = counts[dev < kMaxDevices ? dev : 0];
  if (c == 0 || dev >= kMaxDevices) CUDA_CHECK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev));
  return std::max(c, 1);
}

bool gqa_head_dim(int d) { return d == 64 || d == 80 || d == 96 || d == 128 || d == 256; }

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// How a decode batch runs: the GQA kernel (head chunks of up to kMaxHeadsPerBlock query heads per KV
// head) or the scalar one, and the number of key splits.
struct DecodePlan {
  bool gqa = false;
  int head_chunks = 1;
  int splits = 1;
};

DecodePlan decode_plan(const PagedAttentionCudaParams& p) {
  DecodePlan plan;
  const int group = p.num_heads / p.num_kv_heads;
  plan.gqa = gqa_head_dim(p.head_dim) && aligned16(p.k_cache) && aligned16(p.v_cache) && attention_fast_paths();
  plan.head_chunks = (group + kMaxHeadsPerBlock - 1) / kMaxHeadsPerBlock;
  const int64_t blocks =
      p.num_tokens * (plan.gqa ? static_cast<int64_t>(p.num_kv_heads) * plan.head_chunks : p.num_heads);
  int64_t ctx = p.max_seq_len > 0 ? p.max_seq_len : p.max_blocks_per_seq * p.block_size;
  if (p.sliding_window > 0) ctx = std::min<int64_t>(ctx, p.sliding_window);
  // Two blocks per SM; a split covers at least kMinKeysPerSplit keys of the longest context.
  const int64_t target = 2 * static_cast<int64_t>(sm_count());
  if (blocks >= target) return plan;
  const int64_t want = (target + blocks - 1) / blocks;
  const int64_t by_len = (ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  plan.splits = static_cast<int>(std::clamp<int64_t>(std::min(want, by_len), 1, kMaxSplits));
  return plan;
}

template <int D>
void launch_gqa_decode_d(const PagedAttentionCudaParams& p, const DecodePlan& plan, float* partial_o,
                         float* partial_ml, cudaStream_t stream) {
  const int group = p.num_heads / p.num_kv_heads;
  const int hb = std::min(group, kMaxHeadsPerBlock);
  const size_t smem = sizeof(float) * GqaShape<D>::kKeyGroups * hb * D;  // at most 32 KiB
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads * plan.head_chunks), static_cast<unsigned>(p.num_tokens),
                  static_cast<unsigned>(plan.splits));
#define CYPRIS_GQA_LAUNCH(L) \
  gqa_decode_kernel<D, L><<<grid, kGqaThreads, smem, stream>>>(p, plan.head_chunks, plan.splits, partial_o, partial_ml)
  switch (p.cache_dtype) {
    case DType::F16: CYPRIS_GQA_LAUNCH(LoadF16); break;
    case DType::BF16: CYPRIS_GQA_LAUNCH(LoadBF16); break;
    case DType::F8E4M3: CYPRIS_GQA_LAUNCH(LoadE4M3); break;
    case DType::F8E5M2: CYPRIS_GQA_LAUNCH(LoadE5M2); break;
    default: CYPRIS_GQA_LAUNCH(LoadF32);
  }
#undef CYPRIS_GQA_LAUNCH
}

void launch_gqa_decode(const PagedAttentionCudaParams& p, const DecodePlan& plan, float* partial_o, float* partial_ml,
                       cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: launch_gqa_decode_d<64>(p, plan, partial_o, partial_ml, stream); break;
    case 80: launch_gqa_decode_d<80>(p, plan, partial_o, partial_ml, stream); break;
    case 96: launch_gqa_decode_d<96>(p, plan, partial_o, partial_ml, stream); break;
    case 128: launch_gqa_decode_d<128>(p, plan, partial_o, partial_ml, stream); break;
    default: launch_gqa_decode_d<256>(p, plan, partial_o, partial_ml, stream);
  }
}

void launch_scalar_decode(const PagedAttentionCudaParams& p, int splits, float* partial_o, float* partial_ml,
                          cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_tokens),
                  static_cast<unsigned>(splits));
  const size_t smem = decode_smem_bytes(p.head_dim);
#define CYPRIS_DECODE_LAUNCH(L) \
  decode_kernel<L><<<grid, kDecodeThreads, smem, stream>>>(p, splits, partial_o, partial_ml)
  switch (p.cache_dtype) {
    case DType::F16: CYPRIS_DECODE_LAUNCH(LoadF16); break;
    case DType::BF16: CYPRIS_DECODE_LAUNCH(LoadBF16); break;
    case DType::F8E4M3: CYPRIS_DECODE_LAUNCH(LoadE4M3); break;
    case DType::F8E5M2: CYPRIS_DECODE_LAUNCH(LoadE5M2); break;
    default: CYPRIS_DECODE_LAUNCH(LoadF32);
  }
#undef CYPRIS_DECODE_LAUNCH
}

}  // namespace

size_t paged_attention_workspace_bytes(const PagedAttentionCudaParams& p) {
  if (p.num_tokens <= 0 || p.num_seqs == 0 || p.num_kv_heads <= 0 || !all_decode(p)) return 0;
  const int splits = decode_plan(p).splits;
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
  CYPRIS_CHECK(is_kv_cache_dtype(p.cache_dtype), "attention: unsupported KV cache type {}", dtype_name(p.cache_dtype));
  CYPRIS_CHECK(p.io_dtype == DType::F32 || p.io_dtype == DType::BF16 || p.io_dtype == DType::F16,
               "attention: q and out must be float32, bfloat16 or float16, got {}", dtype_name(p.io_dtype));
  if (p.num_tokens <= 0 || p.num_seqs == 0) return;
  if (all_decode(p)) {
    CYPRIS_CHECK(p.num_tokens <= 65535, "attention: {} decode tokens exceed the grid limit", p.num_tokens);
    const DecodePlan plan = decode_plan(p);
    float* partial_o = nullptr;
    float* partial_ml = nullptr;
    if (plan.splits > 1) {
      CYPRIS_CHECK(workspace != nullptr, "attention: the split-K workspace is missing");
      partial_o = static_cast<float*>(workspace);
      partial_ml = partial_o + static_cast<size_t>(p.num_tokens) * p.num_heads * plan.splits * p.head_dim;
    }
    if (plan.gqa) {
      launch_gqa_decode(p, plan, partial_o, partial_ml, stream);
    } else {
      launch_scalar_decode(p, plan.splits, partial_o, partial_ml, stream);
    }
    CUDA_CHECK(cudaGetLastError());
    if (plan.splits > 1) {
      const dim3 mgrid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_tokens));
      merge_splits_kernel<<<mgrid, 128, 0, stream>>>(p, plan.splits, partial_o, partial_ml);
      CUDA_CHECK(cudaGetLastError());
    }
    return;
  }
  if (prefill_tc_eligible(p)) {
    launch_prefill_tc(p, stream);
    return;
  }
  switch (p.cache_dtype) {
    case DType::F16: launch_prefill<LoadF16>(p, stream); break;
    case DType::BF16: launch_prefill<LoadBF16>(p, stream); break;
    case DType::F8E4M3: launch_prefill<LoadE4M3>(p, stream); break;
    case DType::F8E5M2: launch_prefill<LoadE5M2>(p, stream); break;
    default: launch_prefill<LoadF32>(p, stream);
  }
}

}  // namespace cypris
