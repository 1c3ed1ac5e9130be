#include "kernels/cpu/ops.h"

#include <cmath>
#include <cstring>

#include "engine/common/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

void parallel(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1) {
  if (pool) {
    pool->parallel_for(n, fn, min_chunk);
  } else {
    fn(0, n);
  }
}

void rms_row(const float* x, const float* w, float eps, int64_t hidden, float* out) {
  // Accumulate in double: the norm of one row is cheap and this keeps it independent of order.
  double ss = 0.0;
  for (int64_t i = 0; i < hidden; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps));
  for (int64_t i = 0; i < hidden; ++i) out[i] = w[i] * (x[i] * inv);
}

}  // namespace

void embedding_cpu(const int32_t* ids, int64_t num_tokens, const void* table, DType table_dtype, int64_t vocab,
                   int64_t hidden, float* out, ThreadPool* pool) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    CYPRIS_CHECK(ids[t] >= 0 && ids[t] < vocab, "token id {} at position {} is out of range [0, {})", ids[t], t, vocab);
  }
  if (dtype_is_quantized(table_dtype)) {
    quant_embedding(ids, num_tokens, table, table_dtype, hidden, out, pool);
    return;
  }
  const size_t esize = dtype_size(table_dtype);
  parallel(pool, num_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      convert_to_f32(static_cast<const char*>(table) + static_cast<int64_t>(ids[t]) * hidden * esize, table_dtype,
                     out + t * hidden, hidden);
    }
  });
}

void rms_norm_cpu(const float* x, const float* weight, float eps, int64_t rows, int64_t hidden, float* out,
                  ThreadPool* pool) {
  parallel(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) rms_row(x + r * hidden, weight, eps, hidden, out + r * hidden);
  });
}

void layer_norm_cpu(const float* x, const float* weight, const float* bias, float eps, int64_t rows, int64_t hidden,
                    float* out, ThreadPool* pool) {
  parallel(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * hidden;
      float* o = out + r * hidden;
      // Two passes in double: the mean, then the variance of the centred row (no cancellation).
      double sum = 0.0;
      for (int64_t i = 0; i < hidden; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(hidden);
      double ss = 0.0;
      for (int64_t i = 0; i < hidden; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps));
      const float m = static_cast<float>(mean);
      for (int64_t i = 0; i < hidden; ++i) o[i] = weight[i] * ((xr[i] - m) * inv) + (bias ? bias[i] : 0.0f);
    }
  });
}

void fused_add_rms_norm_cpu(float* x, float* residual, const float* weight, float eps, int64_t rows, int64_t hidden,
                            ThreadPool* pool) {
  parallel(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * hidden;
      float* rr = residual + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) rr[i] += xr[i];
      rms_row(rr, weight, eps, hidden, xr);
    }
  });
}

void rotary_cpu(float* q, int64_t ldq, int num_q_heads, float* k, int64_t ldk, int num_kv_heads, int head_dim,
                int rot_dim, const int32_t* positions, int64_t num_tokens, const float* cos_sin, int64_t max_pos,
                ThreadPool* pool) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    CYPRIS_CHECK(positions[t] >= 0 && positions[t] < max_pos,
                 "position {} of token {} is outside the rotary table [0, {}) (--max-model-len)", positions[t], t,
                 max_pos);
  }
  const int half = rot_dim / 2;
  auto rotate = [&](float* head, const float* cs) {
    const float* c = cs;
    const float* s = cs + half;
    for (int i = 0; i < half; ++i) {
      const float x1 = head[i];
      const float x2 = head[i + half];
      head[i] = x1 * c[i] - x2 * s[i];
      head[i + half] = x2 * c[i] + x1 * s[i];
    }
  };
  parallel(pool, num_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = cos_sin + static_cast<int64_t>(positions[t]) * rot_dim;
      for (int h = 0; h < num_q_heads; ++h) rotate(q + t * ldq + h * head_dim, cs);
      for (int h = 0; h < num_kv_heads; ++h) rotate(k + t * ldk + h * head_dim, cs);
    }
  });
}

#if defined(__x86_64__)
// sigmoid(x) for 16 lanes: 1 / (1 + e) for x >= 0 and e / (1 + e) below, with e = exp(-|x|) <= 1
// (simd::exp_nonpositive, relative error below 1e-7), so no lane overflows and there is no
// cancellation; NaN stays NaN.
CYPRIS_TARGET_AVX512 static inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = simd::exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_div_ps(_mm512_mask_mov_ps(e, pos, one), _mm512_add_ps(one, e));
}

// o = act(g) * u over the whole 16-lane part of a row: silu(g) = g sigmoid(g); gelu_tanh(g) =
// 0.5 g (1 + tanh(z)) = g sigmoid(2 z), z = sqrt(2 / pi) (g + 0.044715 g^3). Returns the count done.
template <bool kGelu>
CYPRIS_TARGET_AVX512 static int64_t act_mul_avx512(const float* g, const float* u, int64_t n, float* o) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    __m512 arg = gv;
    if constexpr (kGelu) {
      const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(gv, gv), gv);
      arg = _mm512_mul_ps(_mm512_set1_ps(2.0f * 0.7978845608028654f),
                          _mm512_fmadd_ps(g3, _mm512_set1_ps(0.044715f), gv));
    }
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_mul_ps(gv, sigmoid16(arg)), _mm512_loadu_ps(u + i)));
  }
  return i;
}
#endif

namespace {

// out[t, i] = act(x[t, i]) * x[t, inter + i]: AVX-512 over the 16-lane part of each row, the scalar
// formula for the rest (and without AVX-512).
template <bool kGelu>
void gated_act_cpu(const float* x, int64_t num_tokens, int64_t inter, float* out, ThreadPool* pool) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  parallel(pool, num_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* g = x + t * 2 * inter;
      const float* u = g + inter;
      float* o = out + t * inter;
      int64_t i = 0;
#if defined(__x86_64__)
      if (simd::has_avx512()) i = act_mul_avx512<kGelu>(g, u, inter, o);
#endif
      for (; i < inter; ++i) {
        const float v = g[i];
        if constexpr (kGelu) {
          o[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v))) * u[i];
        } else {
          o[i] = v / (1.0f + std::exp(-v)) * u[i];
        }
      }
    }
  });
}

}  // namespace

void silu_and_mul_cpu(const float* x, int64_t num_tokens, int64_t inter, float* out, ThreadPool* pool) {
  gated_act_cpu<false>(x, num_tokens, inter, out, pool);
}

namespace {

// fn(head index, head pointer) for every head of every row, rows split over the pool.
template <typename Fn>
void for_each_head(float* x, int64_t ld, int64_t rows, int heads, int head_dim, ThreadPool* pool, Fn fn) {
  parallel(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int h = 0; h < heads; ++h) fn(h, x + r * ld + static_cast<int64_t>(h) * head_dim);
    }
  });
}

}  // namespace

void rms_norm_heads_cpu(float* x, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight, float eps,
                        ThreadPool* pool) {
  for_each_head(x, ld, rows, heads, head_dim, pool,
                [&](int, float* v) { rms_row(v, weight, eps, head_dim, v); });
}

void layer_norm_heads_cpu(float* x, int64_t ld, int64_t rows, int heads, int head_dim, const float* weight, float eps,
                          ThreadPool* pool) {
  // RMSNorm of the centred head (its mean square is the variance), with the head's weight row.
  for_each_head(x, ld, rows, heads, head_dim, pool, [&](int h, float* v) {
    float mean = 0.0f;
    for (int i = 0; i < head_dim; ++i) mean += v[i];
    mean /= static_cast<float>(head_dim);
    for (int i = 0; i < head_dim; ++i) v[i] -= mean;
    rms_row(v, weight + static_cast<int64_t>(h) * head_dim, eps, head_dim, v);
  });
}

void gelu_tanh_and_mul_cpu(const float* x, int64_t num_tokens, int64_t inter, float* out, ThreadPool* pool) {
  gated_act_cpu<true>(x, num_tokens, inter, out, pool);
}

void scale_and_cap_cpu(float* x, int64_t rows, int64_t cols, int64_t ld, float scale, float cap, ThreadPool* pool) {
  parallel(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = x + r * ld;
      if (cap > 0.0f) {
        for (int64_t i = 0; i < cols; ++i) row[i] = cap * std::tanh(row[i] * scale / cap);
      } else {
        for (int64_t i = 0; i < cols; ++i) row[i] *= scale;
      }
    }
  });
}

void gather_rows_cpu(const float* x, int64_t num_rows_x, int64_t hidden, const int32_t* indices, int64_t count,
                     float* out) {
  for (int64_t r = 0; r < count; ++r) {
    CYPRIS_CHECK(indices[r] >= 0 && indices[r] < num_rows_x, "logits index {} is out of range [0, {})", indices[r],
                 num_rows_x);
    std::memcpy(out + r * hidden, x + static_cast<int64_t>(indices[r]) * hidden, sizeof(float) * hidden);
  }
}

void scatter_add_rows_cpu(const float* src, int64_t count, int64_t hidden, const int32_t* indices, const float* weights,
                          float* out, int64_t rows_out) {
  for (int64_t r = 0; r < count; ++r) {
    CYPRIS_CHECK(indices[r] >= 0 && indices[r] < rows_out, "scatter_add_rows: row index {} is out of range [0, {})",
                 indices[r], rows_out);
    float* o = out + static_cast<int64_t>(indices[r]) * hidden;
    const float* s = src + r * hidden;
    const float w = weights[r];
    for (int64_t i = 0; i < hidden; ++i) o[i] += w * s[i];
  }
}

void add_rows_cpu(const float* x, int64_t ldx, float* out, int64_t ldo, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = x + r * ldx;
    float* o = out + r * ldo;
    for (int64_t i = 0; i < cols; ++i) o[i] += a[i];
  }
}

void argmax_rows_cpu(const float* x, int64_t rows, int64_t vocab, int64_t ld, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ld;
    int32_t best = -1;
    for (int64_t i = 0; i < vocab; ++i) {
      if (std::isnan(row[i])) continue;
      if (best < 0 || row[i] > row[best]) best = static_cast<int32_t>(i);
    }
    out[r] = best < 0 ? 0 : best;
  }
}

}  // namespace cypris
