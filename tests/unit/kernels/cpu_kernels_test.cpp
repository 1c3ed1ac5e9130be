// CPU kernels against naive double-precision references on fresh random inputs, outputs poisoned
// before each run: GEMM with F32/F16/BF16 weights, norms, rotary, activation, paged attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/attention_cases.h"

namespace cypris {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// max |a - b| / max |b|
double norm_err(const float* a, const std::vector<double>& b) {
  double diff = 0, mag = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    mag = std::max(mag, std::abs(b[i]));
  }
  return diff / mag;
}

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

TEST(ThreadPool, CoversEveryIndexOnceAndPropagatesErrors) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
    // Nested use runs inline instead of deadlocking.
    pool.parallel_for(2, [](int64_t, int64_t) {});
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t b, int64_t) {
                                   if (b > 50) throw Error("boom");
                                 }),
               Error);
  int sum = 0;
  pool.parallel_for(
      10, [&](int64_t b, int64_t e) { (void)b, (void)e; }, 1);
  pool.parallel_for(1, [&](int64_t b, int64_t e) { sum += static_cast<int>(e - b); });
  EXPECT_EQ(sum, 1);
}

// The hand-off between jobs: many short jobs back to back (workers polling), jobs after pauses
// longer than the spin time (workers asleep and woken), a slow chunk (the caller asleep until the
// last chunk ends), and callers on several outside threads at once. Every index must run exactly
// once per job and each job must be complete when parallel_for returns.
TEST(ThreadPool, JobsBackToBackAfterPausesAndFromSeveralThreadsEachRunOnce) {
  ThreadPool pool(4);
  auto check_job = [&](int64_t n, int64_t min_chunk, std::chrono::microseconds chunk_sleep) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          if (chunk_sleep.count() > 0) std::this_thread::sleep_for(chunk_sleep);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        },
        min_chunk);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " index " << i;
  };
  for (int job = 0; job < 3000; ++job) check_job(1 + job % 97, 1 + job % 5, std::chrono::microseconds(0));
  const auto pause = ThreadPool::spin_time() + std::chrono::milliseconds(2);
  for (int job = 0; job < 5; ++job) {
    std::this_thread::sleep_for(pause);
    check_job(64, 1, std::chrono::microseconds(0));
    check_job(8, 1, pause);
  }
  check_job(200000, 1, std::chrono::microseconds(0));  // more chunks than the state word counts
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int job = 0; job < 500; ++job) {
        std::atomic<int64_t> total{0};
        pool.parallel_for(33, [&](int64_t b, int64_t e) { total += e - b; });
        if (total.load() != 33) ++failures;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

struct GemmCase {
  int64_t m, k, n;
  DType dtype;
  bool bias;
};

class Gemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(Gemm, MatchesNaiveProductOfTheStoredWeights) {
  const GemmCase c = GetParam();
  const int64_t ldx = c.k + 3, ldy = c.n + 5;  // strided rows, as column slices are
  std::vector<float> x = randn(c.m * ldx, 1);
  std::vector<float> wf = randn(c.n * c.k, 2, 0.2f);
  std::vector<float> bias = randn(c.n, 3);
  std::vector<uint16_t> w16(wf.size());
  const void* w = wf.data();
  if (c.dtype != DType::F32) {
    convert_from_f32(wf.data(), c.dtype, w16.data(), static_cast<int64_t>(wf.size()));
    convert_to_f32(w16.data(), c.dtype, wf.data(), static_cast<int64_t>(wf.size()));  // the values actually stored
    w = w16.data();
  }
  std::vector<double> ref(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double s = c.bias ? bias[j] : 0.0;
      for (int64_t l = 0; l < c.k; ++l) s += static_cast<double>(x[i * ldx + l]) * wf[j * c.k + l];
      ref[i * c.n + j] = s;
    }
  }
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    std::vector<float> y(c.m * ldy, kPoison);
    gemm_xwt(x.data(), c.m, c.k, ldx, w, c.dtype, c.n, c.bias ? bias.data() : nullptr, y.data(), ldy, p);
    std::vector<float> packed(c.m * c.n);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) packed[i * c.n + j] = y[i * ldy + j];
    }
    EXPECT_LT(norm_err(packed.data(), ref), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Gemm,
    ::testing::Values(GemmCase{1, 64, 5, DType::F32, false}, GemmCase{7, 17, 300, DType::F16, true},
                      GemmCase{33, 300, 129, DType::BF16, true}, GemmCase{1, 1000, 700, DType::BF16, false},
                      GemmCase{5, 2048, 70, DType::F16, false}, GemmCase{16, 96, 513, DType::F32, true},
                      // m <= 4 takes the fused convert-and-dot path; odd k tests its tail
                      GemmCase{1, 17, 9, DType::F16, true}, GemmCase{3, 100, 40, DType::F32, true},
                      GemmCase{4, 37, 33, DType::BF16, false}, GemmCase{2, 2048, 70, DType::F16, false},
                      // prefill sizes of 16-bit weights: register tiles of 6 x 4 with ragged edges, k in
                      // blocks of 512 with a tail
                      GemmCase{13, 1100, 70, DType::F16, true}, GemmCase{24, 1024, 37, DType::BF16, false},
                      GemmCase{9, 16, 4, DType::F16, false}, GemmCase{200, 600, 9, DType::BF16, true}));

TEST(ThreadPool, ParallelForGroupsCoversEveryGroupAndItemOnce) {
  ThreadPool pool(3);
  for (int64_t groups : {1, 5, 64}) {
    for (int64_t n : {1, 7, 100}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(groups * n));
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        for (auto& h : hits) h = 0;
        parallel_for_groups(
            p, groups, n,
            [&](int64_t g, int64_t j0, int64_t j1) {
              ASSERT_TRUE(g >= 0 && g < groups && j0 >= 0 && j0 < j1 && j1 <= n) << g << " " << j0 << " " << j1;
              for (int64_t j = j0; j < j1; ++j) hits[static_cast<size_t>(g * n + j)]++;
            },
            3);
        for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << groups << "x" << n << " item " << i;
      }
    }
  }
}

// A MoE projection: experts of one shape, each over its own run of rows (some empty, rows between
// runs belonging to no group), decode-sized runs and larger ones in one call. Each run must be
// the naive product with its own weights; rows outside every run keep their poison.
TEST(GemmGrouped, EachRunIsItsOwnWeightsProductAndOtherRowsAreUntouched) {
  const int64_t k = 203, n = 37, ldx = k + 2, ldy = n + 3;
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, 1}, {1, 0}, {2, 3}, {6, 8}, {14, 12}, {27, 2}};
  const int64_t m = 30;  // rows 5, 26, 29 are in no run
  ThreadPool pool(2);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    std::vector<std::vector<float>> wf;
    std::vector<std::vector<uint16_t>> w16(runs.size());
    std::vector<GemmGroup> groups;
    for (size_t g = 0; g < runs.size(); ++g) {
      wf.push_back(randn(n * k, 40 + static_cast<uint32_t>(g), 0.2f));
      const void* w = wf[g].data();
      if (dt != DType::F32) {
        w16[g].resize(wf[g].size());
        convert_from_f32(wf[g].data(), dt, w16[g].data(), n * k);
        convert_to_f32(w16[g].data(), dt, wf[g].data(), n * k);  // the values actually stored
        w = w16[g].data();
      }
      groups.push_back({w, runs[g].first, runs[g].second});
    }
    const std::vector<float> x = randn(m * ldx, 9);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<float> y(m * ldy, kPoison);
      gemm_xwt_grouped(x.data(), k, ldx, groups.data(), static_cast<int64_t>(groups.size()), dt, n, y.data(), ldy, p);
      std::vector<bool> covered(m, false);
      for (size_t g = 0; g < runs.size(); ++g) {
        const auto [first, rows] = runs[g];
        if (rows == 0) continue;
        std::vector<double> ref(rows * n);
        std::vector<float> got(rows * n);
        for (int64_t i = 0; i < rows; ++i) {
          covered[first + i] = true;
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t l = 0; l < k; ++l) s += static_cast<double>(x[(first + i) * ldx + l]) * wf[g][j * k + l];
            ref[i * n + j] = s;
            got[i * n + j] = y[(first + i) * ldy + j];
          }
        }
        EXPECT_LT(norm_err(got.data(), ref), 1e-5) << dtype_name(dt) << " run " << g;
      }
      for (int64_t i = 0; i < m; ++i) {
        if (covered[i]) continue;
        for (int64_t j = 0; j < n; ++j) ASSERT_TRUE(std::isnan(y[i * ldy + j])) << "row " << i << " was written";
      }
    }
  }
}

TEST(Convert, F16AndBf16RoundTrip) {
  std::vector<float> v = {0.0f, -1.5f, 65504.0f, 1e-7f, 3.14159f};
  std::vector<uint16_t> h(v.size());
  std::vector<float> back(v.size());
  convert_from_f32(v.data(), DType::F16, h.data(), 5);
  convert_to_f32(h.data(), DType::F16, back.data(), 5);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back[i], f16_to_f32(f32_to_f16(v[i])));
  EXPECT_EQ(back[2], 65504.0f);
  convert_from_f32(v.data(), DType::BF16, h.data(), 5);
  convert_to_f32(h.data(), DType::BF16, back.data(), 5);
  EXPECT_NEAR(back[4], 3.14159f, 0.02f);
}

TEST(Ops, RmsNormAndFusedResidual) {
  const int64_t rows = 5, h = 48;
  std::vector<float> x = randn(rows * h, 4), res = randn(rows * h, 5), w = randn(h, 6);
  std::vector<double> ref(rows * h), ref_fused(rows * h), sum(rows * h);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0, ss2 = 0;
    for (int64_t i = 0; i < h; ++i) {
      ss += double(x[r * h + i]) * x[r * h + i];
      sum[r * h + i] = double(x[r * h + i]) + res[r * h + i];
      ss2 += sum[r * h + i] * sum[r * h + i];
    }
    for (int64_t i = 0; i < h; ++i) {
      ref[r * h + i] = w[i] * x[r * h + i] / std::sqrt(ss / h + 1e-5);
      ref_fused[r * h + i] = w[i] * sum[r * h + i] / std::sqrt(ss2 / h + 1e-5);
    }
  }
  ThreadPool pool(2);
  std::vector<float> out(rows * h, kPoison);
  rms_norm_cpu(x.data(), w.data(), 1e-5f, rows, h, out.data(), &pool);
  EXPECT_LT(norm_err(out.data(), ref), 1e-6);
  fused_add_rms_norm_cpu(x.data(), res.data(), w.data(), 1e-5f, rows, h, &pool);
  EXPECT_LT(norm_err(x.data(), ref_fused), 1e-6);
  EXPECT_LT(norm_err(res.data(), sum), 1e-7);
}

TEST(Ops, RotaryRotatesPairsHalfApart) {
  const int hq = 2, hkv = 1, d = 8, rot = 6, t = 3;
  const int64_t ld = hq * d + 4;
  std::vector<float> q = randn(t * ld, 7), k = randn(t * hkv * d, 8);
  const std::vector<float> q0 = q, k0 = k;
  const int64_t max_pos = 10;
  std::vector<float> cs(max_pos * rot);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int i = 0; i < rot / 2; ++i) {
      cs[p * rot + i] = std::cos(0.3f * p * (i + 1));
      cs[p * rot + rot / 2 + i] = std::sin(0.3f * p * (i + 1));
    }
  }
  const int32_t pos[] = {0, 4, 9};
  rotary_cpu(q.data(), ld, hq, k.data(), hkv * d, hkv, d, rot, pos, t, cs.data(), max_pos, nullptr);
  for (int tk = 0; tk < t; ++tk) {
    for (int h = 0; h < hq; ++h) {
      const float* a = q0.data() + tk * ld + h * d;
      const float* b = q.data() + tk * ld + h * d;
      for (int i = 0; i < rot / 2; ++i) {
        const double th = 0.3 * pos[tk] * (i + 1);
        EXPECT_NEAR(b[i], a[i] * std::cos(th) - a[i + rot / 2] * std::sin(th), 1e-5);
        EXPECT_NEAR(b[i + rot / 2], a[i + rot / 2] * std::cos(th) + a[i] * std::sin(th), 1e-5);
      }
      for (int i = rot; i < d; ++i) EXPECT_EQ(b[i], a[i]);  // past rot_dim: untouched
    }
  }
  EXPECT_NE(k, k0);
  const int32_t bad[] = {0, 4, 10};
  EXPECT_THROW(rotary_cpu(q.data(), ld, hq, k.data(), hkv * d, hkv, d, rot, bad, t, cs.data(), max_pos, nullptr),
               Error);
}

// Wide rows take the vectorised path (16 lanes, then a scalar tail): silu(g) * u and
// gelu_tanh(g) * u against fp64 over gates from -120 to 120 (exp(-g) overflows fp32 at the low
// end), zero and NaN.
TEST(Ops, GatedActivationsMatchFp64OnWideRowsAndExtremeGates) {
  const int64_t inter = 100, tokens = 3;
  std::vector<float> x = randn(tokens * 2 * inter, 21, 4.0f);
  for (int64_t i = 0; i < inter; i += 7) x[i] = -120.0f + 2.4f * static_cast<float>(i);  // row 0's gates
  x[2 * inter] = 0.0f;
  x[2 * inter + 1] = std::numeric_limits<float>::quiet_NaN();
  ThreadPool pool(2);
  for (bool gelu : {false, true}) {
    std::vector<float> out(tokens * inter, kPoison);
    if (gelu) {
      gelu_tanh_and_mul_cpu(x.data(), tokens, inter, out.data(), &pool);
    } else {
      silu_and_mul_cpu(x.data(), tokens, inter, out.data(), &pool);
    }
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = x[t * 2 * inter + i], u = x[t * 2 * inter + inter + i];
        const double z = 0.7978845608028654 * (g + 0.044715 * g * g * g);
        const double want = gelu ? 0.5 * g * (1 + std::tanh(z)) * u : g / (1 + std::exp(-g)) * u;
        const float got = out[t * inter + i];
        if (std::isnan(g)) {
          EXPECT_TRUE(std::isnan(got)) << i;
          continue;
        }
        // The scalar tail of gelu loses 1 + tanh(z) to cancellation for very negative z (down to
        // an absolute 1e-7 * |g u|); the vector part does not.
        EXPECT_NEAR(got, want, 1e-6 * std::abs(want) + (gelu ? 1e-7 * std::abs(g * u) : 0.0) + 1e-30)
            << (gelu ? "gelu" : "silu") << " token " << t << " gate " << g;
      }
    }
  }
}

TEST(Ops, SiluAndMulAndEmbedding) {
  std::vector<float> x = randn(2 * 2 * 10, 9), out(20, kPoison);
  silu_and_mul_cpu(x.data(), 2, 10, out.data(), nullptr);
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 10; ++i) {
      const double g = x[t * 20 + i], u = x[t * 20 + 10 + i];
      EXPECT_NEAR(out[t * 10 + i], g / (1 + std::exp(-g)) * u, 1e-6);
    }
  }
  std::vector<float> table = randn(6 * 4, 10);
  std::vector<uint16_t> t16(table.size());
  convert_from_f32(table.data(), DType::BF16, t16.data(), 24);
  const int32_t ids[] = {5, 0};
  std::vector<float> e(8, kPoison);
  embedding_cpu(ids, 2, t16.data(), DType::BF16, 6, 4, e.data(), nullptr);
  EXPECT_EQ(e[0], bf16_to_f32(t16[20]));
  EXPECT_EQ(e[7], bf16_to_f32(t16[3]));
  const int32_t bad[] = {6};
  EXPECT_THROW(embedding_cpu(bad, 1, t16.data(), DType::BF16, 6, 4, e.data(), nullptr), Error);
}

// Naive fp64 attention over each sequence's keys in the paged cache (float32 cache), with the
// sliding window and Gemma 2's softcap.
std::vector<double> naive_attention(const testing_support::PagedBatch& b, const std::vector<float>& q,
                                    const std::vector<float>& kc, const std::vector<float>& vc, double scale,
                                    int window, double softcap = 0.0) {
  const int hq = b.num_heads, hkv = b.num_kv_heads, d = b.head_dim;
  const int64_t kv_w = b.kv_row();
  std::vector<double> ref(static_cast<size_t>(b.num_tokens * hq * d));
  for (int s = 0; s < b.num_seqs; ++s) {
    for (int i = 0; i < b.query_len(s); ++i) {
      const int64_t t = b.query_start_loc[s] + i;
      const int pos = b.seq_lens[s] - b.query_len(s) + i;
      for (int h = 0; h < hq; ++h) {
        const int g = h / (hq / hkv);
        std::vector<double> sc;
        std::vector<const float*> vs;
        for (int j = 0; j <= pos; ++j) {
          if (window > 0 && j <= pos - window) continue;
          const int64_t slot = int64_t{b.block_of(s, j)} * b.block_size + j % b.block_size;
          const float* kr = kc.data() + slot * kv_w + g * d;
          double dot = 0;
          for (int x = 0; x < d; ++x) dot += double(q[t * hq * d + h * d + x]) * kr[x];
          dot *= scale;
          if (softcap > 0) dot = softcap * std::tanh(dot / softcap);
          sc.push_back(dot);
          vs.push_back(vc.data() + slot * kv_w + g * d);
        }
        double mx = -1e300, sum = 0;
        for (double v : sc) mx = std::max(mx, v);
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int x = 0; x < d; ++x) {
          double o = 0;
          for (size_t j = 0; j < sc.size(); ++j) o += sc[j] / sum * vs[j][x];
          ref[t * hq * d + h * d + x] = o;
        }
      }
    }
  }
  return ref;
}

// Paged attention for a batch mixing a prefill chunk with context, a fresh prefill and a
// decode, against naive attention over each sequence's contiguous K/V.
class Attention : public ::testing::TestWithParam<int> {};

TEST_P(Attention, MatchesNaiveCausalAttention) {
  const int window = GetParam();
  testing_support::PagedBatch b = testing_support::mixed_paged_batch();
  const int hq = b.num_heads, d = b.head_dim;
  const int64_t kv_w = b.kv_row();
  std::vector<float> kc = randn(b.num_slots() * kv_w, 11), vc = randn(b.num_slots() * kv_w, 12);
  const int64_t tokens = b.num_tokens;
  std::vector<float> q = randn(tokens * hq * d, 13);
  const float scale = 0.25f;
  const std::vector<double> ref = naive_attention(b, q, kc, vc, scale, window);
  std::vector<float> out(tokens * hq * d, kPoison);
  PagedAttentionParams p;
  p.q = q.data();
  p.ldq = hq * d;
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  testing_support::set_paged_batch(p, b);
  p.scale = scale;
  p.sliding_window = window;
  p.out = out.data();
  p.ldo = hq * d;
  ThreadPool pool(2);
  paged_attention_cpu(p, &pool);
  EXPECT_LT(norm_err(out.data(), ref), 1e-5);

  b.block_tables[4] = static_cast<int32_t>(b.num_blocks);  // a block id past the cache
  EXPECT_THROW(paged_attention_cpu(p, &pool), Error);
}

INSTANTIATE_TEST_SUITE_P(Windows, Attention, ::testing::Values(0, 3, 100));

// The model shapes the kernel meets: head dims 64-256 (and 40, not a multiple of 16: the scalar
// path), query heads per KV head from 1 to 12 (blocks of 8, 4, 2 and 1 heads), contexts past 16 keys
// with ragged tails, softcap, and 32-, 16- and 8-bit caches (fp8 with scales that are not powers of
// two), each against fp64 attention over the values the cache holds — on every instruction-set path
// this CPU has (AVX-512, AVX2, plain C++).
struct AttentionShape {
  int head_dim, num_heads, num_kv_heads;
  float softcap;
  int window;
};

class AttentionShapes : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(AttentionShapes, MatchFp64ForEveryCacheType) {
  const AttentionShape c = GetParam();
  testing_support::PagedBatch b =
      testing_support::shuffled_paged_batch(c.head_dim, c.num_heads, c.num_kv_heads, 16, {{37, 37}, {1, 53}, {5, 21}});
  const int64_t kv_w = b.kv_row(), q_w = b.q_row();
  const std::vector<float> k = randn(b.num_slots() * kv_w, 41, 0.5f), v = randn(b.num_slots() * kv_w, 42);
  const std::vector<float> q = randn(b.num_tokens * q_w, 43);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ThreadPool pool(2);
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Scalar}) {
      if (!cpu_has_isa(isa)) continue;
      std::vector<float> kr = k, vr = v;  // the values the cache holds, as fp32
      std::vector<uint16_t> k16(k.size()), v16(v.size());
      std::vector<uint8_t> k8(k.size()), v8(v.size());
      const bool fp8 = dt == DType::F8E4M3 || dt == DType::F8E5M2;
      const float k_scale = 0.013f, v_scale = 0.7f;
      if (fp8) {
        std::vector<int64_t> slots(b.num_slots());
        for (int64_t i = 0; i < b.num_slots(); ++i) slots[i] = i;
        write_kv_cache_cpu(k.data(), kv_w, v.data(), kv_w, b.num_slots(), slots.data(), kv_w, k8.data(), v8.data(),
                           b.num_slots(), dt, k_scale, v_scale, isa);
        for (size_t i = 0; i < k.size(); ++i) {
          const auto decode = [dt](uint8_t c) { return dt == DType::F8E4M3 ? fp8_e4m3_to_f32(c) : fp8_e5m2_to_f32(c); };
          kr[i] = decode(k8[i]) * k_scale;
          vr[i] = decode(v8[i]) * v_scale;
        }
      } else if (dt != DType::F32) {
        for (size_t i = 0; i < k.size(); ++i) {
          k16[i] = dt == DType::BF16 ? f32_to_bf16(k[i]) : f32_to_f16(k[i]);
          v16[i] = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
          kr[i] = dt == DType::BF16 ? bf16_to_f32(k16[i]) : f16_to_f32(k16[i]);
          vr[i] = dt == DType::BF16 ? bf16_to_f32(v16[i]) : f16_to_f32(v16[i]);
        }
      }
      const std::vector<double> ref = naive_attention(b, q, kr, vr, scale, c.window, c.softcap);
      std::vector<float> out(b.num_tokens * q_w, kPoison);
      PagedAttentionParams p;
      p.q = q.data();
      p.ldq = q_w;
      p.k_cache = dt == DType::F32 ? static_cast<const void*>(k.data())
                  : fp8            ? static_cast<const void*>(k8.data())
                                   : static_cast<const void*>(k16.data());
      p.v_cache = dt == DType::F32 ? static_cast<const void*>(v.data())
                  : fp8            ? static_cast<const void*>(v8.data())
                                   : static_cast<const void*>(v16.data());
      p.cache_dtype = dt;
      p.k_scale = k_scale;  // ignored by 32- and 16-bit caches
      p.v_scale = v_scale;
      testing_support::set_paged_batch(p, b);
      p.scale = scale;
      p.sliding_window = c.window;
      p.softcap = c.softcap;
      p.out = out.data();
      p.ldo = q_w;
      p.isa = isa;
      paged_attention_cpu(p, &pool);
      EXPECT_LT(norm_err(out.data(), ref), 2e-6) << dtype_name(dt) << " " << cpu_isa_name(isa);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionShapes,
                         ::testing::Values(AttentionShape{64, 12, 12, 0.0f, 0}, AttentionShape{128, 8, 1, 0.0f, 0},
                                           AttentionShape{128, 12, 1, 0.0f, 7}, AttentionShape{80, 6, 2, 0.0f, 0},
                                           AttentionShape{96, 10, 2, 0.0f, 0}, AttentionShape{256, 8, 4, 50.0f, 0},
                                           AttentionShape{256, 4, 2, 30.0f, 20}, AttentionShape{40, 4, 2, 0.0f, 0}),
                         [](const ::testing::TestParamInfo<AttentionShape>& i) {
                           const AttentionShape& c = i.param;
                           return "d" + std::to_string(c.head_dim) + "_h" + std::to_string(c.num_heads) + "_kv" +
                                  std::to_string(c.num_kv_heads) + (c.softcap > 0 ? "_softcap" : "") +
                                  (c.window > 0 ? "_window" + std::to_string(c.window) : "");
                         });

// Per-head LayerNorm without bias (Command R+'s q/k norms) against fp64, on a column slice whose
// other columns stay untouched.
TEST(Ops, LayerNormHeadsMatchesFp64) {
  const int64_t rows = 5, heads = 3, d = 40, ld = heads * d + 7;
  std::vector<float> x = randn(rows * ld, 51, 2.0f);
  for (float& v : x) v += 1.5f;
  const std::vector<float> w = randn(heads * d, 52);
  std::vector<float> y = x;
  layer_norm_heads_cpu(y.data(), ld, rows, heads, d, w.data(), 1e-5f, nullptr);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* v = x.data() + r * ld + h * d;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < d; ++i) mean += v[i];
      mean /= d;
      for (int64_t i = 0; i < d; ++i) var += (v[i] - mean) * (v[i] - mean);
      const double inv = 1.0 / std::sqrt(var / d + 1e-5);
      for (int64_t i = 0; i < d; ++i) {
        worst = std::max(worst, std::abs(y[r * ld + h * d + i] - w[h * d + i] * (v[i] - mean) * inv));
      }
    }
    for (int64_t i = heads * d; i < ld; ++i) ASSERT_EQ(y[r * ld + i], x[r * ld + i]);
  }
  EXPECT_LT(worst, 1e-5);
}

// Whole-row LayerNorm (Cohere's norms), with and without bias, against the textbook formula in fp64;
// rows far from zero mean, where E[x²] - mean² would lose the variance in float.
TEST(Ops, LayerNormMatchesFp64Formula) {
  for (const int64_t hidden : {int64_t{1}, int64_t{7}, int64_t{256}, int64_t{1000}}) {
    const int64_t rows = 6;
    std::vector<float> x = randn(rows * hidden, 53, 2.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < hidden; ++i) x[r * hidden + i] += 100.0f * static_cast<float>(r);
    }
    const std::vector<float> w = randn(hidden, 54), b = randn(hidden, 55);
    for (const bool with_bias : {false, true}) {
      std::vector<float> y(x.size(), std::nanf(""));
      ThreadPool pool(2);
      layer_norm_cpu(x.data(), w.data(), with_bias ? b.data() : nullptr, 1e-5f, rows, hidden, y.data(), &pool);
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float* v = x.data() + r * hidden;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < hidden; ++i) mean += v[i];
        mean /= static_cast<double>(hidden);
        for (int64_t i = 0; i < hidden; ++i) var += (v[i] - mean) * (v[i] - mean);
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(hidden) + 1e-5);
        for (int64_t i = 0; i < hidden; ++i) {
          const double want = w[i] * (v[i] - mean) * inv + (with_bias ? b[i] : 0.0);
          worst = std::max(worst, std::abs(y[r * hidden + i] - want));
        }
      }
      EXPECT_LT(worst, 2e-5) << "hidden " << hidden << (with_bias ? " with bias" : "");
    }
  }
}

TEST(KvCache, WriteBySlotSkipsPadding) {
  const int64_t w = 4;
  std::vector<float> k = {1, 2, 3, 4, 5, 6, 7, 8}, v = {9, 10, 11, 12, 13, 14, 15, 16};
  std::vector<float> kc(5 * w, 0), vc(5 * w, 0);
  const int64_t slots[] = {3, -1};
  write_kv_cache_cpu(k.data(), w, v.data(), w, 2, slots, w, kc.data(), vc.data(), 5);
  EXPECT_EQ(kc[12], 1);
  EXPECT_EQ(vc[15], 12);
  EXPECT_EQ(std::count(kc.begin(), kc.end(), 0.0f), 16);
  const int64_t bad[] = {5, 0};
  EXPECT_THROW(write_kv_cache_cpu(k.data(), w, v.data(), w, 2, bad, w, kc.data(), vc.data(), 5), Error);
}

// A bf16 / fp16 cache: the writer stores each element rounded to nearest even (the scales, which only
// fp8 uses, are ignored), and attention over it equals fp32 attention over the rounded K/V.
class HalfKvCache : public ::testing::TestWithParam<DType> {};

TEST_P(HalfKvCache, WriteRoundsAndAttentionMatchesFp32OverRoundedKv) {
  const DType dt = GetParam();
  const auto to16 = [dt](float x) { return dt == DType::BF16 ? f32_to_bf16(x) : f32_to_f16(x); };
  const auto from16 = [dt](uint16_t h) { return dt == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h); };
  for (int window : {0, 3}) {
    testing_support::PagedBatch b = testing_support::mixed_paged_batch();
    const int64_t kv_w = b.kv_row(), slots_n = b.num_slots();
    const std::vector<float> k = randn(slots_n * kv_w, 31, 3.0f), v = randn(slots_n * kv_w, 32);
    std::vector<int64_t> slots(slots_n);
    for (int64_t i = 0; i < slots_n; ++i) slots[i] = (i * 7) % slots_n;  // a permutation (slots_n = 64)
    slots[5] = -1;                                                       // padding: slot 35 keeps its fill
    std::vector<uint16_t> kc(slots_n * kv_w, 0x7e00), vc(slots_n * kv_w, 0x7e00);
    write_kv_cache_cpu(k.data(), kv_w, v.data(), kv_w, slots_n, slots.data(), kv_w, kc.data(), vc.data(), slots_n, dt,
                       2.0f, 0.5f);
    std::vector<float> kr(slots_n * kv_w, 0.0f), vr(slots_n * kv_w, 0.0f);  // the rounded values, fp32
    for (int64_t t = 0; t < slots_n; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      for (int64_t x = 0; x < kv_w; ++x) {
        ASSERT_EQ(kc[slot * kv_w + x], to16(k[t * kv_w + x])) << "token " << t << " element " << x;
        ASSERT_EQ(vc[slot * kv_w + x], to16(v[t * kv_w + x]));
      }
    }
    for (int64_t i = 0; i < slots_n * kv_w; ++i) {
      kr[i] = from16(kc[i]);
      vr[i] = from16(vc[i]);
    }
    EXPECT_EQ(kc[35 * kv_w], 0x7e00) << "a padding token was written";
    // The unwritten slot 35 holds the fill; no sequence reads it.
    for (auto& id : b.block_tables) ASSERT_NE(id, 35 / b.block_size);

    const int64_t tokens = b.num_tokens, q_w = b.q_row();
    const std::vector<float> q = randn(tokens * q_w, 33);
    PagedAttentionParams p;
    p.q = q.data();
    p.ldq = q_w;
    testing_support::set_paged_batch(p, b);
    p.scale = 0.25f;
    p.sliding_window = window;
    p.ldo = q_w;
    std::vector<float> want(tokens * q_w, kPoison), got(tokens * q_w, kPoison);
    p.k_cache = kr.data();
    p.v_cache = vr.data();
    p.out = want.data();
    ThreadPool pool(2);
    paged_attention_cpu(p, &pool);
    p.k_cache = kc.data();
    p.v_cache = vc.data();
    p.cache_dtype = dt;
    p.k_scale = 2.0f;  // ignored for a 16-bit cache
    p.v_scale = 0.5f;
    p.out = got.data();
    paged_attention_cpu(p, &pool);
    EXPECT_LT(norm_err(got.data(), std::vector<double>(want.begin(), want.end())), 1e-6) << "window " << window;

    p.io_dtype = DType::BF16;  // the CPU kernel reads and writes fp32 only
    EXPECT_THROW(paged_attention_cpu(p, &pool), Error);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfKvCache, ::testing::Values(DType::BF16, DType::F16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return i.param == DType::BF16 ? std::string("bf16") : std::string("f16");
                         });

TEST(Argmax, FirstMaximumWinsAndNanIsSkipped) {
  const float x[] = {1,       5,       5,       2,         // tie: index 1
                     kPoison, 3,       kPoison, 4,         // NaN skipped: index 3
                     kPoison, kPoison, kPoison, kPoison};  // all NaN: 0
  int32_t out[3] = {-1, -1, -1};
  argmax_rows_cpu(x, 3, 4, 4, out);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 3);
  EXPECT_EQ(out[2], 0);
  const float strided[] = {0, 9, 100, 7, 8, 100};  // ld 3 > vocab 2: the third column is outside
  argmax_rows_cpu(strided, 2, 2, 3, out);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 1);
}

}  // namespace
}  // namespace cypris
