#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cpu/attention_group.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {

bool is_kv_cache_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F8E4M3 || t == DType::F8E5M2;
}

namespace {

bool is_fp8(DType t) {
  return t == DType::F8E4M3 || t == DType::F8E5M2;
}

// fp32(code) * scale for all 256 codes: decoding a cached row is then one table load per element.
void dequant_table(DType dtype, float scale, float* table) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    table[c] = (dtype == DType::F8E4M3 ? fp8_e4m3_to_f32(code) : fp8_e5m2_to_f32(code)) * scale;
  }
}

}  // namespace

bool cpu_has_isa(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Auto:
    case CpuIsa::Scalar:
      return true;
#if defined(__x86_64__)
    case CpuIsa::Avx512:
      return simd::has_avx512();
    case CpuIsa::Avx2:
      return simd::has_avx2_fma();
#endif
    default:
      return false;
  }
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512:
      return "avx512";
    case CpuIsa::Avx2:
      return "avx2";
    case CpuIsa::Scalar:
      return "scalar";
    default:
      return "auto";
  }
}

namespace {

float dot(const float* a, const float* b, int n) {
  // Four partial sums let the compiler vectorise without -ffast-math.
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// One work item of paged attention: query token t against KV head g of its sequence s, over the
// cached positions [lo, lo + n) (causal, and the sliding window when set).
struct AttentionItem {
  int64_t t;
  int g;
  int s;
  int64_t lo, n;
  const int32_t* block_table;
};

AttentionItem attention_item(const PagedAttentionParams& p, const std::vector<int32_t>& token_seq, int64_t item) {
  AttentionItem it;
  it.t = item / p.num_kv_heads;
  it.g = static_cast<int>(item % p.num_kv_heads);
  it.s = token_seq[it.t];
  const int32_t q_len = p.query_start_loc[it.s + 1] - p.query_start_loc[it.s];
  const int64_t pos = p.seq_lens[it.s] - q_len + (it.t - p.query_start_loc[it.s]);
  it.lo = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
  it.n = pos - it.lo + 1;
  it.block_table = p.block_tables + it.s * p.max_blocks_per_seq;
  return it;
}

}  // namespace

void paged_attention_cpu(const PagedAttentionParams& p, ThreadPool* pool) {
  CYPRIS_CHECK(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
               "attention: {} query heads are not a multiple of {} KV heads", p.num_heads, p.num_kv_heads);
  CYPRIS_CHECK(p.io_dtype == DType::F32, "attention on the CPU: q and out must be float32, got {} (io_dtype)",
               dtype_name(p.io_dtype));
  CYPRIS_CHECK(p.block_size > 0, "attention: block_size must be positive");
  CYPRIS_CHECK(p.query_start_loc[0] == 0, "attention: query_start_loc[0] must be 0");
  const int64_t num_tokens = p.query_start_loc[p.num_seqs];
  std::vector<int32_t> token_seq(static_cast<size_t>(std::max<int64_t>(num_tokens, 0)));
  for (int s = 0; s < p.num_seqs; ++s) {
    const int32_t q0 = p.query_start_loc[s];
    const int32_t q1 = p.query_start_loc[s + 1];
    CYPRIS_CHECK(q1 >= q0, "attention: query_start_loc is not increasing at sequence {}", s);
    CYPRIS_CHECK(p.seq_lens[s] >= q1 - q0, "attention: sequence {} has {} new tokens but seq_len {}", s, q1 - q0,
                 p.seq_lens[s]);
    const int64_t blocks = (p.seq_lens[s] + p.block_size - 1) / p.block_size;
    CYPRIS_CHECK(blocks <= p.max_blocks_per_seq, "attention: sequence {} needs {} blocks, block table has {}", s,
                 blocks, p.max_blocks_per_seq);
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t id = p.block_tables[s * p.max_blocks_per_seq + b];
      CYPRIS_CHECK(id >= 0 && id < p.num_blocks, "attention: block table of sequence {} names block {} (cache has {})",
                   s, id, p.num_blocks);
    }
    for (int32_t t = q0; t < q1; ++t) token_seq[t] = s;
  }
  CYPRIS_CHECK(is_kv_cache_dtype(p.cache_dtype), "attention: unsupported cache type {}", dtype_name(p.cache_dtype));
  const int group = p.num_heads / p.num_kv_heads;
  const int d = p.head_dim;
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * d;  // elements per cached token
  const int64_t block_stride = kv_row * p.block_size;
  const bool fp8 = is_fp8(p.cache_dtype);
  const bool decode_rows = p.cache_dtype != DType::F32;
  const bool bf16 = p.cache_dtype == DType::BF16;
  const auto* q_base = static_cast<const float*>(p.q);
  auto* out_base = static_cast<float*>(p.out);
  float k_table[256], v_table[256];
  if (fp8) {
    dequant_table(p.cache_dtype, p.k_scale, k_table);
    dequant_table(p.cache_dtype, p.v_scale, v_table);
  }

  CYPRIS_CHECK(cpu_has_isa(p.isa), "attention: this CPU has no {} instructions", cpu_isa_name(p.isa));
  const bool auto_isa = p.isa == CpuIsa::Auto;
  const bool avx512 = (auto_isa || p.isa == CpuIsa::Avx512) && cpu_has_isa(CpuIsa::Avx512) && d % 16 == 0;
  const bool avx2 = !avx512 && p.isa != CpuIsa::Scalar && cpu_has_isa(CpuIsa::Avx2) && d % 8 == 0;
  if (avx512 || avx2) {
    const float k_mul = fp8 ? simd::fp8_load_factor(p.cache_dtype) * p.k_scale : 1.0f;
    const float v_mul = fp8 ? simd::fp8_load_factor(p.cache_dtype) * p.v_scale : 1.0f;
    auto fast = [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> scores;
      thread_local std::vector<int64_t> offsets;
      thread_local std::vector<float> inv_sum;
      inv_sum.resize(static_cast<size_t>(group));
      for (int64_t item = i0; item < i1; ++item) {
        const auto [t, g, s, lo, n, table] = attention_item(p, token_seq, item);
        offsets.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          const int64_t kp = lo + j;
          offsets[j] = table[kp / p.block_size] * block_stride + (kp % p.block_size) * kv_row + g * d;
        }
        scores.resize(static_cast<size_t>(n * group));
        const attention_detail::GroupAttention a{q_base + t * p.ldq + static_cast<int64_t>(g) * group * d,
                                                 out_base + t * p.ldo + static_cast<int64_t>(g) * group * d,
                                                 p.k_cache,
                                                 p.v_cache,
                                                 offsets.data(),
                                                 n,
                                                 d,
                                                 p.scale,
                                                 p.softcap,
                                                 scores.data(),
                                                 k_mul,
                                                 v_mul};
        if (avx512) {
          attention_detail::attend_group_avx512(p.cache_dtype, a, group, inv_sum.data());
        } else {
          attention_detail::attend_group_avx2(p.cache_dtype, a, group, inv_sum.data());
        }
      }
    };
    const int64_t items = num_tokens * p.num_kv_heads;
    if (pool) {
      pool->parallel_for(items, fast);
    } else {
      fast(0, items);
    }
    return;
  }

  // The plain C++ path (no AVX2, or a head dim that is not a multiple of 8): fp8 / 16-bit rows are
  // decoded into fp32 scratch once per work item, then the fp32 code runs.
  auto work = [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scores;
    thread_local std::vector<const float*> k_rows;
    thread_local std::vector<const float*> v_rows;
    thread_local std::vector<float> k_deq, v_deq;
    for (int64_t item = i0; item < i1; ++item) {
      const auto [t, g, s, lo, n, table] = attention_item(p, token_seq, item);
      k_rows.resize(n);
      v_rows.resize(n);
      if (decode_rows) {
        k_deq.resize(static_cast<size_t>(n * d));
        v_deq.resize(static_cast<size_t>(n * d));
      }
      for (int64_t j = 0; j < n; ++j) {
        const int64_t kp = lo + j;
        const int64_t off = table[kp / p.block_size] * block_stride + (kp % p.block_size) * kv_row + g * d;
        if (!decode_rows) {
          k_rows[j] = static_cast<const float*>(p.k_cache) + off;
          v_rows[j] = static_cast<const float*>(p.v_cache) + off;
          continue;
        }
        float* kd = k_deq.data() + j * d;
        float* vd = v_deq.data() + j * d;
        if (fp8) {
          const uint8_t* kc = static_cast<const uint8_t*>(p.k_cache) + off;
          const uint8_t* vc = static_cast<const uint8_t*>(p.v_cache) + off;
          for (int x = 0; x < d; ++x) {
            kd[x] = k_table[kc[x]];
            vd[x] = v_table[vc[x]];
          }
        } else {
          const uint16_t* kc = static_cast<const uint16_t*>(p.k_cache) + off;
          const uint16_t* vc = static_cast<const uint16_t*>(p.v_cache) + off;
          for (int x = 0; x < d; ++x) {
            kd[x] = bf16 ? bf16_to_f32(kc[x]) : f16_to_f32(kc[x]);
            vd[x] = bf16 ? bf16_to_f32(vc[x]) : f16_to_f32(vc[x]);
          }
        }
        k_rows[j] = kd;
        v_rows[j] = vd;
      }
      scores.resize(n);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* q = q_base + t * p.ldq + static_cast<int64_t>(h) * d;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          scores[j] = dot(q, k_rows[j], d) * p.scale;
          if (p.softcap > 0.0f) scores[j] = p.softcap * std::tanh(scores[j] / p.softcap);
          mx = std::max(mx, scores[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          scores[j] = std::exp(scores[j] - mx);
          sum += scores[j];
        }
        const float inv = 1.0f / sum;
        float* o = out_base + t * p.ldo + static_cast<int64_t>(h) * d;
        std::fill(o, o + d, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          const float w = scores[j] * inv;
          const float* v = v_rows[j];
          for (int x = 0; x < d; ++x) o[x] += w * v[x];
        }
      }
    }
  };
  const int64_t items = num_tokens * p.num_kv_heads;
  if (pool) {
    pool->parallel_for(items, work);
  } else {
    work(0, items);
  }
}

}  // namespace cypris
