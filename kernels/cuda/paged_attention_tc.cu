// Tensor-core prefill for paged attention (FlashAttention-2 structure) when q and the KV cache are both
// bf16 or both fp16. One thread block of 4 warps per (tile of kBq = 64 rows, KV head, sequence), where
// a row is a (query token, query head of the GQA group) pair: the group's heads share the tile, so K/V
// tiles are read once per group, and a decode token in a mixed batch costs G rows, not a 64-row tile.
// Each warp owns 16 rows; S = Q K^T and O += P V run on mma.sync.m16n8k16 (16-bit inputs, fp32
// accumulators) with fragments loaded from shared memory as 32-bit words (rows padded by 8 elements so
// the 8 x 4 fragment pattern hits 32 distinct banks); V is stored transposed in shared memory so its
// B fragments are contiguous too. P stays in registers: the S accumulator layout is the A-fragment
// layout of the next mma. Online softmax per row in fp32 (the quad of lanes sharing a row reduces with
// two shuffles). K/V rows are gathered from the paged cache with 16-byte loads through the block table;
// masked keys (causal, sliding window, past the tile) score -inf and missing rows are zero-filled, so
// the products never see garbage. Head dims are a template parameter (all of 64, 80, 96, 128, 256 are
// multiples of 16, the mma k step).
#include "kernels/cuda/paged_attention_tc.cuh"

#include <cstdlib>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "engine/common/error.h"
#include "kernels/cuda/cuda_check.h"

namespace cypris::cuda_detail {
namespace {

constexpr int kTcThreads = 128;
constexpr int kBq = 64;  // rows per block: 4 warps x 16

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as one 32-bit word of T, the first in the low half (the lower column index).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

template <typename T>
__device__ __forceinline__ uint32_t ld32(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ int64_t cache_offset(const int32_t* table, int block_size, int64_t kv_row, int g, int d,
                                                int64_t key) {
  return static_cast<int64_t>(table[key / block_size]) * block_size * kv_row + (key % block_size) * kv_row +
         static_cast<int64_t>(g) * d;
}

template <int D>
struct TcShape {
  static constexpr int kBk = D > 128 ? 32 : 64;  // keys per tile
  static constexpr int kQs = D + 8;              // shared row stride of Q and K (elements)
  static constexpr int kVs = kBk + 8;            // shared row stride of V^T
  static constexpr int kNtS = kBk / 8;           // n-tiles of S per warp
  static constexpr int kNtO = D / 8;             // n-tiles of O per warp
  static constexpr int kKsQk = D / 16;           // k steps of Q K^T
  static constexpr int kKsPv = kBk / 16;         // k steps of P V
  static constexpr size_t kSmemBytes = sizeof(uint16_t) * (static_cast<size_t>(kBq) * kQs + kBk * kQs + D * kVs);
  static_assert(D % 16 == 0, "tensor-core prefill: head_dim must be a multiple of 16");
};

// grid (ceil(max_query_len * group / kBq), num_kv_heads, num_seqs).
template <int D, typename T>
static __global__ void __launch_bounds__(kTcThreads, 1) prefill_tc_kernel(PagedAttentionCudaParams p) {
  using S = TcShape<D>;
  constexpr int kBk = S::kBk;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ uint4 tc_smem_raw[];  // 16-byte aligned
  T* q_s = reinterpret_cast<T*>(tc_smem_raw);  // [kBq][kQs]
  T* k_s = q_s + kBq * S::kQs;                 // [kBk][kQs]
  T* vt_s = k_s + kBk * S::kQs;                // [D][kVs]: V transposed
  __shared__ int64_t koff_s[kBk];              // cache offset of each key of the tile, -1 past the range

  const int s = blockIdx.z;
  const int g = blockIdx.y;
  const int group = p.num_heads / p.num_kv_heads;
  const int32_t qs0 = p.query_start_loc[s];
  const int32_t q_len = p.query_start_loc[s + 1] - qs0;
  const int rows_total = q_len * group;
  const int r0 = blockIdx.x * kBq;
  if (r0 >= rows_total) return;  // uniform over the block
  const int64_t ctx0 = static_cast<int64_t>(p.seq_lens[s]) - q_len;  // position of the sequence's first query
  const int64_t pos_first = ctx0 + r0 / group;
  const int64_t pos_last = ctx0 + (min(rows_total, r0 + kBq) - 1) / group;
  const int64_t lo = p.sliding_window > 0 ? max(int64_t{0}, pos_first - p.sliding_window + 1) : 0;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * D;
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  const T* qg = static_cast<const T*>(p.q);
  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);

  // Q tile, zero rows past the sequence.
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int e = threadIdx.x; e < kBq * kChunks; e += kTcThreads) {
    const int r = e / kChunks, c = e % kChunks;
    const int rr = r0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (rr < rows_total) {
      const int64_t token = qs0 + rr / group;
      const int head = g * group + rr % group;
      v = *reinterpret_cast<const uint4*>(qg + token * p.ldq + static_cast<int64_t>(head) * D + c * 8);
    }
    *reinterpret_cast<uint4*>(q_s + r * S::kQs + c * 8) = v;
  }

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g8 = lane >> 2;  // row in the fragment (and +8)
  const int t4 = lane & 3;   // column pair in the fragment
  const int wr0 = warp * 16;  // the warp's first row in the tile
  const bool warp_active = r0 + wr0 < rows_total;
  const int64_t warp_pos_max = ctx0 + (min(rows_total, r0 + wr0 + 16) - 1) / group;
  const int64_t warp_lo = p.sliding_window > 0 ? max(int64_t{0}, ctx0 + (r0 + wr0) / group - p.sliding_window + 1) : 0;
  // The thread's two rows: wr0 + g8 and wr0 + g8 + 8.
  bool row_valid[2];
  int64_t row_pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int rr = r0 + wr0 + g8 + 8 * i;
    row_valid[i] = rr < rows_total;
    row_pos[i] = ctx0 + rr / group;
  }

  float o[S::kNtO][4];
#pragma unroll
  for (int nt = 0; nt < S::kNtO; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  for (int64_t kt = lo; kt <= pos_last; kt += kBk) {
    __syncthreads();  // Q written (first tile); the previous tile's K, V and offsets are no longer read
    for (int j = threadIdx.x; j < kBk; j += kTcThreads) {
      const int64_t key = kt + j;
      koff_s[j] = key <= pos_last ? cache_offset(table, p.block_size, kv_row, g, D, key) : -1;
    }
    __syncthreads();
    // Key index fastest: a warp's V^T stores then hit consecutive 16-bit words (no bank conflicts).
    for (int e = threadIdx.x; e < kBk * kChunks; e += kTcThreads) {
      const int j = e % kBk, c = e / kBk;
      const int64_t off = koff_s[j];
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (off >= 0) {
        kv = *reinterpret_cast<const uint4*>(kc + off + c * 8);
        vv = *reinterpret_cast<const uint4*>(vc + off + c * 8);
      }
      *reinterpret_cast<uint4*>(k_s + j * S::kQs + c * 8) = kv;
      const T* vh = reinterpret_cast<const T*>(&vv);
#pragma unroll
      for (int x = 0; x < 8; ++x) vt_s[(c * 8 + x) * S::kVs + j] = vh[x];
    }
    __syncthreads();
    // Warps whose rows see no key of this tile skip it (no barrier inside).
    if (!warp_active || kt > warp_pos_max || kt + kBk - 1 < warp_lo) continue;

    float sc[S::kNtS][4];
#pragma unroll
    for (int nt = 0; nt < S::kNtS; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < S::kKsQk; ++ks) {
      const T* qa = q_s + (wr0 + g8) * S::kQs + ks * 16 + 2 * t4;
      const uint32_t a0 = ld32(qa), a1 = ld32(qa + 8 * S::kQs), a2 = ld32(qa + 8), a3 = ld32(qa + 8 * S::kQs + 8);
#pragma unroll
      for (int nt = 0; nt < S::kNtS; ++nt) {
        const T* kb = k_s + (nt * 8 + g8) * S::kQs + ks * 16 + 2 * t4;
        mma_16816<T>(sc[nt], a0, a1, a2, a3, ld32(kb), ld32(kb + 8));
      }
    }
    // Scale, cap, mask; the running max per row.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < S::kNtS; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int h = i >> 1;  // c0, c1: row g8; c2, c3: row g8 + 8
        const int64_t key = kt + nt * 8 + 2 * t4 + (i & 1);
        const int64_t pos = row_pos[h];
        const bool vis = row_valid[h] && key <= pos && (p.sliding_window <= 0 || key > pos - p.sliding_window);
        float x = sc[nt][i] * p.scale;
        if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
        x = vis ? x : -INFINITY;
        sc[nt][i] = x;
        mx[h] = fmaxf(mx[h], x);
      }
    }
    float alpha[2], m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m[h], mx[h]);
      m_use[h] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet: every p is 0
      alpha[h] = exp2f((m[h] - m_use[h]) * kLog2e);   // 0 while m is -inf
      m[h] = m_new;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < S::kNtS; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int h = i >> 1;
        const float e = exp2f((sc[nt][i] - m_use[h]) * kLog2e);
        sc[nt][i] = e;
        rs[h] += e;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 1);
      rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 2);
      l[h] = l[h] * alpha[h] + rs[h];
    }
#pragma unroll
    for (int nt = 0; nt < S::kNtO; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }
    // O += P V: keys 16 kk .. 16 kk + 15 are the S n-tiles 2 kk and 2 kk + 1.
#pragma unroll
    for (int kk = 0; kk < S::kKsPv; ++kk) {
      const uint32_t a0 = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
      const uint32_t a1 = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
      const uint32_t a2 = pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      const uint32_t a3 = pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
      for (int nt = 0; nt < S::kNtO; ++nt) {
        const T* vb = vt_s + (nt * 8 + g8) * S::kVs + kk * 16 + 2 * t4;
        mma_16816<T>(o[nt], a0, a1, a2, a3, ld32(vb), ld32(vb + 8));
      }
    }
  }

  // Normalise and store the thread's two rows.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!row_valid[h]) continue;
    const int rr = r0 + wr0 + g8 + 8 * h;
    const int64_t token = qs0 + rr / group;
    const int head = g * group + rr % group;
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    T* out = static_cast<T*>(p.out) + token * p.ldo + static_cast<int64_t>(head) * D;
#pragma unroll
    for (int nt = 0; nt < S::kNtO; ++nt) {
      const uint32_t w = pack2<T>(o[nt][2 * h] * inv, o[nt][2 * h + 1] * inv);
      *reinterpret_cast<uint32_t*>(out + nt * 8 + 2 * t4) = w;
    }
  }
}

template <int D, typename T>
void launch_tc(const PagedAttentionCudaParams& p, cudaStream_t stream) {
  using S = TcShape<D>;
  const int group = p.num_heads / p.num_kv_heads;
  const int64_t max_q = p.max_query_len > 0 ? p.max_query_len : p.num_tokens;
  const int64_t tiles = (max_q * group + kBq - 1) / kBq;
  CYPRIS_CHECK(tiles <= 0x7fffffff && p.num_seqs <= 65535, "attention: {} row tiles x {} sequences exceed the grid",
               tiles, p.num_seqs);
  // Set on every launch (per device; see launch_prefill in paged_attention.cu).
  if (S::kSmemBytes > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_tc_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(S::kSmemBytes)));
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_seqs));
  prefill_tc_kernel<D, T><<<grid, kTcThreads, S::kSmemBytes, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_tc_type(const PagedAttentionCudaParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: launch_tc<64, T>(p, stream); break;
    case 80: launch_tc<80, T>(p, stream); break;
    case 96: launch_tc<96, T>(p, stream); break;
    case 128: launch_tc<128, T>(p, stream); break;
    case 256: launch_tc<256, T>(p, stream); break;
    default: CYPRIS_FAIL("attention: no tensor-core prefill for head_dim {}", p.head_dim);
  }
}

bool aligned_to(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

bool attention_fast_paths() {
  static const bool on = [] {
    const char* e = std::getenv("CYPRIS_ATTN_FAST");
    return !(e && e[0] == '0');
  }();
  return on;
}

bool prefill_tc_eligible(const PagedAttentionCudaParams& p) {
  if (!CYPRIS_ATTN_TC_PREFILL || !attention_fast_paths()) return false;
  const bool sixteen = p.io_dtype == DType::BF16 || p.io_dtype == DType::F16;
  const int d = p.head_dim;
  return sixteen && p.cache_dtype == p.io_dtype && (d == 64 || d == 80 || d == 96 || d == 128 || d == 256) &&
         p.ldq % 8 == 0 && p.ldo % 2 == 0 && aligned_to(p.q, 16) && aligned_to(p.out, 4) &&
         aligned_to(p.k_cache, 16) && aligned_to(p.v_cache, 16);
}

void launch_prefill_tc(const PagedAttentionCudaParams& p, cudaStream_t stream) {
  if (p.io_dtype == DType::BF16) {
    launch_tc_type<__nv_bfloat16>(p, stream);
  } else {
    launch_tc_type<__half>(p, stream);
  }
}

}  // namespace cypris::cuda_detail
