#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {

bool is_kv_cache_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F8E4M3 || t == DType::F8E5M2;
}

namespace {

bool is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }

void round_row_16(const float* x, int64_t n, DType dtype, uint16_t* out) {
  if (dtype == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
  }
}

void quantize_row(const float* x, int64_t n, float scale, DType dtype, uint8_t* out) {
  // Division, not a multiply by 1/scale: the CUDA kernel divides too, so both store the same bytes.
  if (dtype == DType::F8E4M3) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp8_e4m3(x[i] / scale);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_fp8_e5m2(x[i] / scale);
  }
}

// fp32(code) * scale for all 256 codes: decoding a cached row is then one table load per element.
void dequant_table(DType dtype, float scale, float* table) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    table[c] = (dtype == DType::F8E4M3 ? fp8_e4m3_to_f32(code) : fp8_e5m2_to_f32(code)) * scale;
  }
}

}  // namespace

void write_kv_cache_cpu(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t num_tokens,
                        const int64_t* slot_mapping, int64_t kv_width, void* k_cache, void* v_cache,
                        int64_t num_slots, DType cache_dtype, float k_scale, float v_scale) {
  CYPRIS_CHECK(is_kv_cache_dtype(cache_dtype), "KV cache write: unsupported cache type {}", dtype_name(cache_dtype));
  const bool fp8 = is_fp8(cache_dtype);
  CYPRIS_CHECK(!fp8 || (k_scale > 0.0f && v_scale > 0.0f && std::isfinite(k_scale) && std::isfinite(v_scale)),
               "KV cache write: scales must be positive (k_scale {}, v_scale {})", k_scale, v_scale);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    CYPRIS_CHECK(slot < num_slots, "slot_mapping[{}] = {} is outside the KV cache ({} slots)", t, slot, num_slots);
    if (cache_dtype == DType::F32) {
      std::memcpy(static_cast<float*>(k_cache) + slot * kv_width, k + t * ldk, sizeof(float) * kv_width);
      std::memcpy(static_cast<float*>(v_cache) + slot * kv_width, v + t * ldv, sizeof(float) * kv_width);
    } else if (!fp8) {
      round_row_16(k + t * ldk, kv_width, cache_dtype, static_cast<uint16_t*>(k_cache) + slot * kv_width);
      round_row_16(v + t * ldv, kv_width, cache_dtype, static_cast<uint16_t*>(v_cache) + slot * kv_width);
    } else {
      quantize_row(k + t * ldk, kv_width, k_scale, cache_dtype, static_cast<uint8_t*>(k_cache) + slot * kv_width);
      quantize_row(v + t * ldv, kv_width, v_scale, cache_dtype, static_cast<uint8_t*>(v_cache) + slot * kv_width);
    }
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

#if defined(__x86_64__)
// The AVX-512 path for every cache type and head dims that are multiples of 16: per work item
// (token, KV head) every cached row is read once for all the query heads of its group, converted
// in registers (no fp32 scratch copy), with H heads' 16-wide accumulators held in registers. fp8
// rows widen to fp16 with integer shifts and then to fp32 (simd::load16_fp8), times the layer's
// scale: the same values as the scalar path's table, and half the bytes of a 16-bit cache.
struct GroupAttention {
  const float* q;          // first query head of the group; heads d apart
  float* out;              // same layout
  const void* k_cache;
  const void* v_cache;
  const int64_t* offsets;  // n cached-row offsets (elements) of this KV head
  int64_t n;
  int d;
  float scale;
  float softcap;
  float* scores;  // [group, n]
  float k_mul;    // fp8 only: the factor simd::load16_fp8 applies to K and V rows
  float v_mul;
};

// 16 cached elements from index i as fp32 (fp8: times mul).
template <DType CT>
CYPRIS_TARGET_AVX512 inline __m512 load_cached(const void* base, int64_t i, __m512 mul) {
  if constexpr (CT == DType::F8E4M3 || CT == DType::F8E5M2) {
    return simd::load16_fp8<CT>(base, i, mul);
  } else {
    return simd::load16<CT>(base, i);
  }
}

template <DType CT, int H>
CYPRIS_TARGET_AVX512 void group_scores(const GroupAttention& a, int h0) {
  const int chunks = a.d / 16;
  const __m512 mul = _mm512_set1_ps(a.k_mul);
  for (int64_t j = 0; j < a.n; ++j) {
    __m512 acc[H];
    for (int h = 0; h < H; ++h) acc[h] = _mm512_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
      const __m512 k = load_cached<CT>(a.k_cache, a.offsets[j] + c * 16, mul);
      for (int h = 0; h < H; ++h) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(a.q + (h0 + h) * a.d + c * 16), k, acc[h]);
    }
    for (int h = 0; h < H; ++h) {
      float sv = _mm512_reduce_add_ps(acc[h]) * a.scale;
      if (a.softcap > 0.0f) sv = a.softcap * std::tanh(sv / a.softcap);
      a.scores[(h0 + h) * a.n + j] = sv;
    }
  }
}

// scores[h] becomes softmax weights (not yet divided by their sum); returns the sum.
CYPRIS_TARGET_AVX512 float softmax_unnormalised(float* s, int64_t n) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  float mx = _mm512_reduce_max_ps(vmax);
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  const __m512 m = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= n; j += 16) {
    const __m512 e = simd::exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
    _mm512_storeu_ps(s + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (j < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = simd::exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), m));
    _mm512_mask_storeu_ps(s + j, mask, e);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(mask, e));
  }
  return _mm512_reduce_add_ps(vsum);
}

template <DType CT, int H>
CYPRIS_TARGET_AVX512 void group_values(const GroupAttention& a, int h0, const float* inv_sum) {
  const int chunks = a.d / 16;
  const __m512 mul = _mm512_set1_ps(a.v_mul);
  for (int c = 0; c < chunks; ++c) {
    __m512 acc[H];
    for (int h = 0; h < H; ++h) acc[h] = _mm512_setzero_ps();
    for (int64_t j = 0; j < a.n; ++j) {
      const __m512 v = load_cached<CT>(a.v_cache, a.offsets[j] + c * 16, mul);
      for (int h = 0; h < H; ++h) acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(a.scores[(h0 + h) * a.n + j]), v, acc[h]);
    }
    for (int h = 0; h < H; ++h) {
      _mm512_storeu_ps(a.out + (h0 + h) * a.d + c * 16, _mm512_mul_ps(acc[h], _mm512_set1_ps(inv_sum[h0 + h])));
    }
  }
}

// Heads in register blocks of 8, 4, 2, 1.
template <DType CT>
CYPRIS_TARGET_AVX512 void attend_group_avx512(const GroupAttention& a, int group, float* inv_sum) {
  auto blocks = [&](auto step) {
    int h0 = 0;
    for (; h0 + 8 <= group; h0 += 8) step(std::integral_constant<int, 8>{}, h0);
    for (; h0 + 4 <= group; h0 += 4) step(std::integral_constant<int, 4>{}, h0);
    for (; h0 + 2 <= group; h0 += 2) step(std::integral_constant<int, 2>{}, h0);
    for (; h0 < group; ++h0) step(std::integral_constant<int, 1>{}, h0);
  };
  blocks([&](auto h, int h0) { group_scores<CT, decltype(h)::value>(a, h0); });
  for (int h = 0; h < group; ++h) inv_sum[h] = 1.0f / softmax_unnormalised(a.scores + h * a.n, a.n);
  blocks([&](auto h, int h0) { group_values<CT, decltype(h)::value>(a, h0, inv_sum); });
}
#endif

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
  // Without AVX-512 (or with a head dim that is not a multiple of 16), fp8 / 16-bit: each work item
  // decodes the rows it reads into fp32 scratch once and then runs the fp32 code.
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

#if defined(__x86_64__)
  if (simd::has_avx512() && d % 16 == 0) {
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
        GroupAttention a{q_base + t * p.ldq + static_cast<int64_t>(g) * group * d,
                         out_base + t * p.ldo + static_cast<int64_t>(g) * group * d,
                         p.k_cache, p.v_cache, offsets.data(), n, d, p.scale, p.softcap, scores.data(),
                         k_mul, v_mul};
        switch (p.cache_dtype) {
          case DType::F32: attend_group_avx512<DType::F32>(a, group, inv_sum.data()); break;
          case DType::F16: attend_group_avx512<DType::F16>(a, group, inv_sum.data()); break;
          case DType::F8E4M3: attend_group_avx512<DType::F8E4M3>(a, group, inv_sum.data()); break;
          case DType::F8E5M2: attend_group_avx512<DType::F8E5M2>(a, group, inv_sum.data()); break;
          default: attend_group_avx512<DType::BF16>(a, group, inv_sum.data()); break;
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
#endif

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
