// GPU sampling. Two kernels, both one thread block per row.
//
// argmax_kernel: each thread scans a strided share of the vocabulary (coalesced), then a
// shared-memory tree reduction over (value, index) pairs that prefers the lower index on ties, so
// the result equals std::max_element on the host.
//
// sample_kernel (design): rows are independent and a row is at most 256k floats (1 MiB), so one
// block of 512 threads owns a row and walks it several times from L2/HBM; no cross-block work and
// no global sort. The passes over a row:
//   1. raw max and sum of exp (double accumulators) -> log Z for the logprobs;
//   2. the processed logits into `work`: copy, logit_bias (sparse list), penalties, temperature.
//      Penalties need, per distinct token of the row's history, its output count and whether it
//      occurs at all: the history (CSR) is folded into the `counts` scratch with atomics (prompt
//      ids OR a flag bit, output ids add one), then every history entry atomicExch-es its slot back
//      to 0 and the one thread that gets the non-zero value applies the penalty once -- the scratch
//      is all zero again afterwards, so it is zeroed only when allocated;
//   3. top-k: the k-th largest value by a 4 x 8-bit radix select on order-preserving keys (a 256-bin
//      shared histogram per pass, warp-aggregated adds), keep everything >= it (ties stay, as in
//      the CPU sampler);
//   4. top-p: the same radix walk with a histogram of probability mass (double shared atomics)
//      finds tau, the value where the descending cumulative mass reaches top_p * Z; tokens above
//      tau stay, tokens equal to tau stay in vocabulary order while the mass ahead is < target
//      (top_p_ties_to_keep), which is the CPU rule "smallest prefix of the sorted list";
//   5. min-p: a threshold on the processed max;
//   6. the draw: each thread sums the surviving exp(x - max) over a contiguous chunk, a block
//      exclusive scan gives chunk offsets, u * total (u from Philox4x32-10 keyed by the request's
//      seed, counter = output position) is located by the owning thread -- i.e. an inverse CDF in
//      vocabulary order, exactly the reference's sequential walk up to double rounding;
//   7. logprobs: rank by counting larger raw logits, top-N by radix select of the N-th largest raw
//      logit plus ties in id order, sorted by one thread (N <= 64).
// Temperature 0 takes the argmax after step 2 (bias and penalties can change it). Everything
// depends only on the row's own inputs, so a seeded row gives the same token in any batch.
// exp and log are taken in double (then the same IEEE float/double operations as the reference, no
// FMA contraction where it would round differently), so the GPU and the CPU reference see the same
// weights and thresholds and pick the same token for the same uniform, short of double rounding.
// Cost: about 14 passes over the row (12 without top-p), all L2-friendly for one row per block.
#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "engine/common/error.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling.h"

namespace cypris {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool better(float v, int32_t i, float bv, int32_t bi) {
  return v > bv || (v == bv && i < bi);
}

static __global__ void argmax_kernel(const float* __restrict__ logits, int64_t vocab, int64_t ld,
                                     int32_t* __restrict__ out) {
  __shared__ float vals[kThreads];
  __shared__ int32_t idxs[kThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (!isnan(v) && better(v, static_cast<int32_t>(i), bv, bi)) {
      bv = v;
      bi = static_cast<int32_t>(i);
    }
  }
  vals[threadIdx.x] = bv;
  idxs[threadIdx.x] = bi;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && better(vals[threadIdx.x + s], idxs[threadIdx.x + s], vals[threadIdx.x], idxs[threadIdx.x])) {
      vals[threadIdx.x] = vals[threadIdx.x + s];
      idxs[threadIdx.x] = idxs[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = idxs[0] == INT32_MAX ? 0 : idxs[0];
}

// ------------------------------------------------------------------------------------------------
// Batched sampler

constexpr int kSampleThreads = 512;
constexpr int32_t kPromptFlag = 1 << 30;

// Monotone map float -> uint32 (larger float, larger key) and back.
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ bool is_live(float v) {
  return v > -INFINITY;  // false for -inf (masked) and NaN
}

struct ArgMax {
  float v;
  int32_t i;  // -1: none
};
struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
  }
};

// Shared memory of one row's block. The cub temporaries of every reduction and scan share one
// buffer (each call ends with a barrier before the next may reuse it).
struct Smem {
  union {
    cub::BlockReduce<double, kSampleThreads>::TempStorage reduce_d;
    cub::BlockReduce<int, kSampleThreads>::TempStorage reduce_i;
    cub::BlockReduce<ArgMax, kSampleThreads>::TempStorage reduce_a;
    cub::BlockScan<int, kSampleThreads>::TempStorage scan_i;
    cub::BlockScan<double, kSampleThreads>::TempStorage scan_d;
  } cub;
  uint32_t count[256];
  double mass[256];
  ArgMax bcast_a;
  double bcast_d;
  int32_t bcast_i;
  uint32_t sel_bin;
  int32_t token;
  int32_t last;
  int32_t ntop;
  float top_v[kMaxGpuTopLogprobs];
  int32_t top_i[kMaxGpuTopLogprobs];
};

// The shared slot that hands a block-wide result of type T to every thread.
template <class T>
__device__ T& bcast_slot(Smem& sm);
template <>
__device__ double& bcast_slot<double>(Smem& sm) {
  return sm.bcast_d;
}
template <>
__device__ int& bcast_slot<int>(Smem& sm) {
  return sm.bcast_i;
}
template <>
__device__ ArgMax& bcast_slot<ArgMax>(Smem& sm) {
  return sm.bcast_a;
}

// A block-wide reduction whose result every thread receives (all threads must call): the sum by
// default (cub's Sum), else with op.
struct BlockSum {};
template <class T, class Op = BlockSum>
__device__ T block_reduce(T v, Smem& sm, Op op = {}) {
  using Reduce = cub::BlockReduce<T, kSampleThreads>;
  auto& tmp = reinterpret_cast<typename Reduce::TempStorage&>(sm.cub);
  T r;
  if constexpr (std::is_same_v<Op, BlockSum>) {
    r = Reduce(tmp).Sum(v);
  } else {
    r = Reduce(tmp).Reduce(v, op);
  }
  if (threadIdx.x == 0) bcast_slot<T>(sm) = r;
  __syncthreads();
  const T out = bcast_slot<T>(sm);
  __syncthreads();
  return out;
}

// The sum of v over the threads before this one (all threads must call); total, when asked for,
// receives the sum over all of them.
template <class T>
__device__ T block_exclusive_sum(T v, Smem& sm) {
  using Scan = cub::BlockScan<T, kSampleThreads>;
  T out;
  Scan(reinterpret_cast<typename Scan::TempStorage&>(sm.cub)).ExclusiveSum(v, out);
  __syncthreads();
  return out;
}
template <class T>
__device__ T block_exclusive_sum(T v, Smem& sm, T& total) {
  using Scan = cub::BlockScan<T, kSampleThreads>;
  T out;
  Scan(reinterpret_cast<typename Scan::TempStorage&>(sm.cub)).ExclusiveSum(v, out, total);
  __syncthreads();
  return out;
}

// Histogram add with warp aggregation: most values of a row share the top key byte, so plain
// shared atomics would serialise on one or two bins. Lanes of a warp with the same bin combine
// first and one of them adds (count, and mass when given).
__device__ __forceinline__ void hist_add(uint32_t* count, double* mass, uint32_t bin, double e) {
  const unsigned active = __activemask();
  const unsigned peers = __match_any_sync(active, bin);
  const bool leader = (threadIdx.x & 31) == static_cast<unsigned>(__ffs(peers) - 1);
  if (mass) {
    double s = 0.0;
    for (unsigned m = peers; m; m &= m - 1) s += __shfl_sync(peers, e, __ffs(m) - 1);
    if (leader) atomicAdd(&mass[bin], s);
  }
  if (leader) atomicAdd(&count[bin], static_cast<uint32_t>(__popc(peers)));
}

// The k-th largest (1-based) of the values get(i) with pred(v), by a radix select over the
// order-preserving keys, 8 bits per pass. At least k values must satisfy pred.
template <class Get, class Pred>
__device__ float select_kth_largest(int32_t V, int32_t k, Get get, Pred pred, Smem& sm) {
  uint32_t prefix = 0, mask = 0;
  int32_t remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSampleThreads) sm.count[b] = 0;
    __syncthreads();
    for (int32_t i = threadIdx.x; i < V; i += kSampleThreads) {
      const float v = get(i);
      if (!pred(v)) continue;
      const uint32_t key = order_key(v);
      if ((key & mask) == prefix) hist_add(sm.count, nullptr, (key >> shift) & 255u, 0.0);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int32_t acc = 0;
      int b = 255;
      for (; b > 0; --b) {
        if (acc + static_cast<int32_t>(sm.count[b]) >= remaining) break;
        acc += static_cast<int32_t>(sm.count[b]);
      }
      sm.sel_bin = static_cast<uint32_t>(b);
      sm.bcast_i = remaining - acc;
    }
    __syncthreads();
    prefix |= sm.sel_bin << shift;
    mask |= 255u << shift;
    remaining = sm.bcast_i;
    __syncthreads();
  }
  return key_value(prefix);
}

// tau for top-p: the largest value v among the pred tokens with sum_{x >= v} exp(x - m) >= target
// (the lowest value when rounding never lets the sum reach target).
template <class Get, class Pred>
__device__ float select_mass_threshold(int32_t V, double target, float m, Get get, Pred pred, Smem& sm) {
  uint32_t prefix = 0, mask = 0;
  double above = 0.0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSampleThreads) {
      sm.count[b] = 0;
      sm.mass[b] = 0.0;
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < V; i += kSampleThreads) {
      const float v = get(i);
      if (!pred(v)) continue;
      const uint32_t key = order_key(v);
      if ((key & mask) != prefix) continue;
      hist_add(sm.count, sm.mass, (key >> shift) & 255u, exp(static_cast<double>(v - m)));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double acc = above;
      int b = 255, lowest = 0;
      for (; b >= 0; --b) {
        if (sm.count[b] == 0) continue;
        lowest = b;
        if (acc + sm.mass[b] >= target) break;
        acc += sm.mass[b];
      }
      if (b < 0) {
        b = lowest;
        acc -= sm.mass[b];
      }
      sm.sel_bin = static_cast<uint32_t>(b);
      sm.bcast_d = acc;
    }
    __syncthreads();
    prefix |= sm.sel_bin << shift;
    mask |= 255u << shift;
    above = sm.bcast_d;
    __syncthreads();
  }
  return key_value(prefix);
}

static __global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(SamplingBatch b, SamplingResults out, float* __restrict__ work, int32_t* __restrict__ counts) {
  __shared__ Smem sm;
  const int32_t r = blockIdx.x;
  const int32_t V = b.vocab;
  const int tid = threadIdx.x;
  const SamplingRowParams p = b.params[r];
  const float* raw = b.logits + static_cast<int64_t>(r) * b.ld;
  float* x = work + static_cast<int64_t>(r) * V;
  int32_t* cnt = counts + static_cast<int64_t>(r) * V;
  const int32_t chunk = (V + kSampleThreads - 1) / kSampleThreads;
  const int32_t cb = min(V, tid * chunk), ce = min(V, cb + chunk);

  // 1. raw statistics (logprobs; the raw argmax is the last-resort token)
  ArgMax a{-INFINITY, -1};
  for (int32_t i = tid; i < V; i += kSampleThreads) {
    const float v = raw[i];
    if (!isnan(v) && (a.i < 0 || v > a.v)) a = ArgMax{v, i};
  }
  const ArgMax raw_top = block_reduce(a, sm, ArgMaxOp());
  const float m_raw = raw_top.i >= 0 ? raw_top.v : 0.0f;
  double zs = 0.0;
  for (int32_t i = tid; i < V; i += kSampleThreads) {
    const float v = raw[i];
    if (!isnan(v)) zs += exp(static_cast<double>(v - m_raw));
  }
  const double log_z = log(block_reduce(zs, sm));
  const int32_t fallback = raw_top.i >= 0 ? raw_top.i : 0;

  // 2. processed logits: bias, penalties, temperature
  for (int32_t i = tid; i < V; i += kSampleThreads) x[i] = raw[i];
  __syncthreads();
  if (b.bias_offsets) {
    for (int32_t j = b.bias_offsets[r] + tid; j < b.bias_offsets[r + 1]; j += kSampleThreads) {
      const int32_t id = b.bias_ids[j];
      if (id >= 0 && id < V) x[id] += b.bias_values[j];
    }
  }
  const bool penalties =
      (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) && b.hist_offsets;
  if (penalties) {
    const int32_t hb = b.hist_offsets[r], he = b.hist_offsets[r + 1];
    for (int32_t j = hb + tid; j < he; j += kSampleThreads) {
      const int32_t t = b.hist_ids[j];
      if (t < 0 || t >= V) continue;
      if (j - hb < p.num_prompt_ids) {
        atomicOr(&cnt[t], kPromptFlag);
      } else {
        atomicAdd(&cnt[t], 1);
      }
    }
    __syncthreads();
    for (int32_t j = hb + tid; j < he; j += kSampleThreads) {
      const int32_t t = b.hist_ids[j];
      if (t < 0 || t >= V) continue;
      int32_t c = atomicExch(&cnt[t], 0);
      if (c == 0) continue;  // another entry of the same token owns it
      c &= kPromptFlag - 1;
      float v = x[t];
      if (v == -INFINITY) continue;
      if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
      // no FMA contraction: the same roundings as the CPU
      v -= __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(c)), c > 0 ? p.presence_penalty : 0.0f);
      x[t] = v;
    }
  }
  __syncthreads();
  if (p.temperature != 1.0f && p.temperature > 0.0f) {
    const float inv = static_cast<float>(1.0 / static_cast<double>(p.temperature));
    for (int32_t i = tid; i < V; i += kSampleThreads) x[i] *= inv;
    __syncthreads();
  }
  ArgMax q{-INFINITY, -1};
  for (int32_t i = tid; i < V; i += kSampleThreads) {
    const float v = x[i];
    if (is_live(v) && (q.i < 0 || v > q.v)) q = ArgMax{v, i};
  }
  const ArgMax top = block_reduce(q, sm, ArgMaxOp());

  int32_t token;
  if (p.temperature == 0.0f || top.i < 0) {
    token = top.i >= 0 ? top.i : fallback;
  } else {
    const float m = top.v;
    auto get_x = [x](int32_t i) { return x[i]; };
    // 3. top-k
    float lo = -INFINITY;
    if (p.top_k > 0 && p.top_k < V) {
      int nl = 0;
      for (int32_t i = tid; i < V; i += kSampleThreads) nl += is_live(x[i]);
      if (block_reduce(nl, sm) >= p.top_k)
        lo = select_kth_largest(
            V, p.top_k, get_x, [](float v) { return is_live(v); }, sm);
    }
    auto live1 = [lo](float v) { return is_live(v) && v >= lo; };
    // 4. top-p
    const bool top_p_on = p.top_p < 1.0f;
    float tau = -INFINITY;
    int32_t ties_keep = 0, ties_total = 0;
    if (top_p_on) {
      double z = 0.0;
      for (int32_t i = tid; i < V; i += kSampleThreads) {
        if (live1(x[i])) z += exp(static_cast<double>(x[i] - m));
      }
      const double target = static_cast<double>(p.top_p) * block_reduce(z, sm);
      tau = select_mass_threshold(V, target, m, get_x, live1, sm);
      double above = 0.0;
      int above_count = 0, ties = 0;
      for (int32_t i = tid; i < V; i += kSampleThreads) {
        const float v = x[i];
        if (!live1(v)) continue;
        if (v > tau) {
          above += exp(static_cast<double>(v - m));
          ++above_count;
        } else if (v == tau) {
          ++ties;
        }
      }
      above = block_reduce(above, sm);
      above_count = block_reduce(above_count, sm);
      ties_total = block_reduce(ties, sm);
      ties_keep = top_p_ties_to_keep(above, above_count, exp(static_cast<double>(tau - m)), ties_total, target);
    }
    // 5. min-p
    const float thr = p.min_p > 0.0f ? m + static_cast<float>(log(static_cast<double>(p.min_p))) : -INFINITY;
    // 6. the draw, in vocabulary order over contiguous chunks
    const bool need_rank = top_p_on && ties_keep < ties_total;
    int32_t tie_base = 0;
    if (need_rank) {
      int nt = 0;
      for (int32_t i = cb; i < ce; ++i) nt += live1(x[i]) && x[i] == tau;
      tie_base = block_exclusive_sum(nt, sm);
    }
    auto keep = [&](float v, int32_t& tie_seen) {
      if (!live1(v) || v < thr) return false;
      if (!top_p_on || v > tau) return true;
      if (v < tau) return false;
      return !need_rank || tie_base + tie_seen++ < ties_keep;
    };
    double mine = 0.0;
    int32_t last = -1, seen = 0;
    for (int32_t i = cb; i < ce; ++i) {
      const float v = x[i];
      if (!keep(v, seen)) continue;
      const double e = exp(static_cast<double>(v - m));
      if (e <= 0.0) continue;
      mine += e;
      last = i;
    }
    if (tid == 0) {
      sm.token = INT_MAX;
      sm.last = -1;
    }
    double total;
    const double before = block_exclusive_sum(mine, sm, total);
    const double target = philox_uniform(p.seed, p.position) * total;
    if (last >= 0) atomicMax(&sm.last, last);
    if (target < before + mine) {
      // The crossing is in this chunk or (for later chunks) before it: the lowest id found wins.
      double cum = before;
      seen = 0;
      for (int32_t i = cb; i < ce; ++i) {
        const float v = x[i];
        if (!keep(v, seen)) continue;
        const double e = exp(static_cast<double>(v - m));
        if (e <= 0.0) continue;
        cum += e;
        if (target < cum) {
          atomicMin(&sm.token, i);
          break;
        }
      }
    }
    __syncthreads();
    token = sm.token != INT_MAX ? sm.token : (sm.last >= 0 ? sm.last : top.i);
    __syncthreads();
  }

  // 7. logprobs of the raw logits
  const float tv = raw[token];
  int rank = 0;
  if (p.want_rank) {
    int c = 0;
    for (int32_t i = tid; i < V; i += kSampleThreads) c += raw[i] > tv;
    rank = 1 + block_reduce(c, sm);
  }
  if (tid == 0) {
    out.tokens[r] = token;
    out.logprobs[r] = static_cast<float>(static_cast<double>(tv) - m_raw - log_z);
    out.ranks[r] = rank;
  }
  if (b.max_top <= 0) return;
  int32_t n = min(min(p.num_top_logprobs, b.max_top), kMaxGpuTopLogprobs);
  if (n > 0) {
    int nn = 0;
    for (int32_t i = tid; i < V; i += kSampleThreads) nn += !isnan(raw[i]);
    n = min(n, block_reduce(nn, sm));
  }
  if (n > 0) {
    auto get_raw = [raw](int32_t i) { return raw[i]; };
    auto not_nan = [](float v) { return !isnan(v); };
    const float kth = select_kth_largest(V, n, get_raw, not_nan, sm);
    int g = 0, nt = 0;
    for (int32_t i = tid; i < V; i += kSampleThreads) g += raw[i] > kth;
    for (int32_t i = cb; i < ce; ++i) nt += raw[i] == kth;
    const int need = n - block_reduce(g, sm);
    const int base = block_exclusive_sum(nt, sm);
    if (tid == 0) sm.ntop = 0;
    __syncthreads();
    int seen = 0;
    for (int32_t i = cb; i < ce; ++i) {
      const float v = raw[i];
      if (v > kth || (v == kth && base + seen++ < need)) {
        const int slot = atomicAdd(&sm.ntop, 1);
        if (slot < kMaxGpuTopLogprobs) {
          sm.top_v[slot] = v;
          sm.top_i[slot] = i;
        }
      }
    }
    __syncthreads();
  }
  if (tid == 0) {
    // insertion sort: value descending, id ascending
    for (int32_t k = 1; k < n; ++k) {
      const float v = sm.top_v[k];
      const int32_t id = sm.top_i[k];
      int32_t j = k - 1;
      while (j >= 0 && (sm.top_v[j] < v || (sm.top_v[j] == v && sm.top_i[j] > id))) {
        sm.top_v[j + 1] = sm.top_v[j];
        sm.top_i[j + 1] = sm.top_i[j];
        --j;
      }
      sm.top_v[j + 1] = v;
      sm.top_i[j + 1] = id;
    }
    for (int32_t k = 0; k < b.max_top; ++k) {
      const int64_t o = static_cast<int64_t>(r) * b.max_top + k;
      out.top_ids[o] = k < n ? sm.top_i[k] : -1;
      out.top_logprobs[o] = k < n ? static_cast<float>(static_cast<double>(sm.top_v[k]) - m_raw - log_z) : 0.0f;
    }
  }
}

}  // namespace

void argmax_rows_cuda(const float* logits, int64_t rows, int64_t vocab, int64_t ld, int32_t* out, cudaStream_t stream) {
  CYPRIS_CHECK(vocab > 0 && vocab <= INT32_MAX && ld >= vocab, "argmax_rows_cuda: vocab {} ld {}", vocab, ld);
  if (rows <= 0) return;
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, ld, out);
  CUDA_CHECK(cudaGetLastError());
}

void sample_rows_cuda(const SamplingBatch& batch, const SamplingResults& out, float* work, int32_t* counts,
                      cudaStream_t stream) {
  CYPRIS_CHECK(batch.rows >= 0 && batch.vocab > 0 && batch.ld >= batch.vocab,
               "sample_rows_cuda: rows {} vocab {} ld {}", batch.rows, batch.vocab, batch.ld);
  CYPRIS_CHECK(batch.max_top >= 0 && batch.max_top <= kMaxGpuTopLogprobs,
               "sample_rows_cuda: max_top {} must be in [0, {}]", batch.max_top, kMaxGpuTopLogprobs);
  if (batch.rows == 0) return;
  CYPRIS_CHECK(batch.logits && batch.params && work && counts && out.tokens && out.logprobs && out.ranks,
               "sample_rows_cuda: a required pointer is null");
  sample_kernel<<<static_cast<unsigned>(batch.rows), kSampleThreads, 0, stream>>>(batch, out, work, counts);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cypris
