// The fp8 KV cache on the CPU: write_kv_cache_cpu stores the expected bytes, and paged attention
// over an fp8 cache stays within the error that fp8 rounding of K and V allows of the same
// attention over an fp32 cache (a bound derived below from the inputs, per output element).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/attention_cases.h"

namespace cypris {
namespace {

TEST(Fp8KvCache, WriteStoresScaledBytes) {
  // 1.0 / 0.5 = 2 -> e4m3 0.1000.000 = 0x40; -3 / 0.5 = -6 = -1.5 * 2^2 -> 1.1001.100 = 0xCC;
  // 1000 / 0.5 = 2000 saturates to 448 = 0x7E. v: 0.75 / 2 = 0.375 = 1.5 * 2^-2 -> 0.0101.100 = 0x2C;
  // 1000 / 2 = 500 -> 0x7E; 0 -> 0x00.
  const std::vector<float> k = {1.0f, -3.0f, 1000.0f}, v = {0.75f, 1000.0f, 0.0f};
  std::vector<uint8_t> kc(2 * 3, 0xAA), vc(2 * 3, 0xAA);
  const int64_t slots[] = {1};
  write_kv_cache_cpu(k.data(), 3, v.data(), 3, 1, slots, 3, kc.data(), vc.data(), 2, DType::F8E4M3, 0.5f, 2.0f);
  EXPECT_EQ(std::vector<uint8_t>(kc.begin() + 3, kc.end()), (std::vector<uint8_t>{0x40, 0xCC, 0x7E}));
  EXPECT_EQ(std::vector<uint8_t>(vc.begin() + 3, vc.end()), (std::vector<uint8_t>{0x2C, 0x7E, 0x00}));
  EXPECT_EQ(kc[0], 0xAA);  // other slots untouched
  // e5m2: 2 -> 0.10000.00 = 0x40; -6 = -1.5 * 2^2 -> 1.10001.10 = 0xC6; 2000 = 1.953 * 2^10 -> rounds up to
  // 2^11 = 0.11010.00 = 0x68.
  write_kv_cache_cpu(k.data(), 3, v.data(), 3, 1, slots, 3, kc.data(), vc.data(), 2, DType::F8E5M2, 0.5f, 2.0f);
  EXPECT_EQ(std::vector<uint8_t>(kc.begin() + 3, kc.end()), (std::vector<uint8_t>{0x40, 0xC6, 0x68}));
  EXPECT_THROW(
      write_kv_cache_cpu(k.data(), 3, v.data(), 3, 1, slots, 3, kc.data(), vc.data(), 2, DType::F8E4M3, 0.0f, 1.0f),
      Error);
}

struct Fp8Case {
  DType dtype;
  float magnitude;  // K and V are N(0, magnitude^2)
  float k_scale, v_scale;
};

// The largest rounding error of x stored as fp8(x / s) and read as fp32 * s, when |x / s| is within
// range: half an ulp, i.e. 2^-(mantissa bits + 1) of |x| for normal values, and half the smallest
// subnormal step (times s) below the normal range.
double element_bound(double x, DType dtype, double s) {
  const int mant = dtype == DType::F8E4M3 ? 3 : 2;
  const double half_sub = dtype == DType::F8E4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17);
  return std::max(std::ldexp(std::fabs(x), -(mant + 1)), half_sub * s);
}

class Fp8Attention : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8Attention, WithinTheRoundingBoundOfTheFp32Cache) {
  const Fp8Case c = GetParam();
  const testing_support::PagedBatch b = testing_support::mixed_paged_batch();  // chunk, prefill, decode
  const int hq = b.num_heads, hkv = b.num_kv_heads, d = b.head_dim, bs = b.block_size;
  const int64_t kv_w = b.kv_row(), num_slots = b.num_slots();
  std::mt19937 g(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(num_slots * kv_w), v(num_slots * kv_w);
  for (auto& x : k) x = nd(g) * c.magnitude;
  for (auto& x : v) x = nd(g) * c.magnitude;
  std::vector<int64_t> slots(num_slots);
  for (int64_t i = 0; i < num_slots; ++i) slots[i] = i;
  std::vector<float> kc32(k.size()), vc32(v.size());
  std::vector<uint8_t> kc8(k.size()), vc8(v.size());
  write_kv_cache_cpu(k.data(), kv_w, v.data(), kv_w, num_slots, slots.data(), kv_w, kc32.data(), vc32.data(),
                     num_slots);
  write_kv_cache_cpu(k.data(), kv_w, v.data(), kv_w, num_slots, slots.data(), kv_w, kc8.data(), vc8.data(), num_slots,
                     c.dtype, c.k_scale, c.v_scale);

  const std::vector<int32_t>& qsl = b.query_start_loc;
  const int64_t tokens = b.num_tokens;
  std::vector<float> q(tokens * hq * d);
  for (auto& x : q) x = nd(g);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d)) / c.magnitude;  // keeps scores O(1)

  PagedAttentionParams p;
  p.q = q.data();
  p.ldq = hq * d;
  testing_support::set_paged_batch(p, b);
  p.scale = scale;
  p.ldo = hq * d;
  ThreadPool pool(2);
  std::vector<float> out32(tokens * hq * d, std::numeric_limits<float>::quiet_NaN()), out8 = out32;
  p.k_cache = kc32.data();
  p.v_cache = vc32.data();
  p.out = out32.data();
  paged_attention_cpu(p, &pool);
  p.k_cache = kc8.data();
  p.v_cache = vc8.data();
  p.cache_dtype = c.dtype;
  p.k_scale = c.k_scale;
  p.v_scale = c.v_scale;
  p.out = out8.data();
  paged_attention_cpu(p, &pool);

  // Bound per output o[t, h, x]: with every score perturbed by at most delta = scale * sum_i |q_i| *
  // err(k_ji), each softmax weight moves by a factor within e^(+-2 delta), so
  // |o8 - o32| <= (e^(2 delta) - 1) * max_j |v_jx| + max_j err(v_jx)   (+ fp32 slack).
  double worst_ratio = 0, max_diff = 0, max_out = 0;
  for (int s = 0; s < b.num_seqs; ++s) {
    for (int32_t i = 0; i < b.query_len(s); ++i) {
      const int64_t t = qsl[s] + i;
      const int pos = b.seq_lens[s] - b.query_len(s) + i;
      for (int h = 0; h < hq; ++h) {
        const int grp = h / (hq / hkv);
        double delta = 0;
        std::vector<double> vmax(d, 0), verr(d, 0);
        for (int j = 0; j <= pos; ++j) {
          const int64_t row = (int64_t{b.block_of(s, j)} * bs + j % bs) * kv_w + grp * d;
          double dd = 0;
          for (int x = 0; x < d; ++x) {
            dd += std::fabs(q[t * hq * d + h * d + x]) * element_bound(k[row + x], c.dtype, c.k_scale);
            vmax[x] = std::max(vmax[x], std::fabs(double(v[row + x])));
            verr[x] = std::max(verr[x], element_bound(v[row + x], c.dtype, c.v_scale));
          }
          delta = std::max(delta, dd * scale);
        }
        for (int x = 0; x < d; ++x) {
          const size_t o = static_cast<size_t>(t * hq * d + h * d + x);
          const double bound = std::expm1(2 * delta) * vmax[x] + verr[x] + 1e-5 * vmax[x];
          const double diff = std::fabs(double(out8[o]) - out32[o]);
          ASSERT_LE(diff, bound) << "token " << t << " head " << h << " element " << x;
          worst_ratio = std::max(worst_ratio, diff / bound);
          max_diff = std::max(max_diff, diff);
          max_out = std::max(max_out, std::fabs(double(out32[o])));
        }
      }
    }
  }
  EXPECT_GT(max_diff, 0.0) << "the fp8 cache gave exactly the fp32 result: nothing was quantised";
  // The bound is a worst case; the typical normalised error is far below it (e4m3 ~ 2^-4 / sqrt(n)).
  EXPECT_LT(max_diff / max_out, c.dtype == DType::F8E4M3 ? 0.08 : 0.16);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Fp8Attention,
    ::testing::Values(Fp8Case{DType::F8E4M3, 1.0f, 1.0f, 1.0f}, Fp8Case{DType::F8E5M2, 1.0f, 1.0f, 1.0f},
                      // K, V ~ 1000: beyond e4m3's 448 without a scale; scales bring them in range.
                      Fp8Case{DType::F8E4M3, 1000.0f, 8.0f, 16.0f}, Fp8Case{DType::F8E5M2, 0.01f, 0.001f, 0.002f}));

TEST(Fp8Attention, WithoutAScaleOutliersSaturate) {
  // The same data as the scaled case above but stored with scale 1: values past 448 are clipped, so
  // the cache holds 448 where the input had ~2000 (what a scale is for).
  const std::vector<float> k = {2000.0f, -2000.0f};
  std::vector<uint8_t> kc(2), vc(2);
  const int64_t slot[] = {0};
  write_kv_cache_cpu(k.data(), 2, k.data(), 2, 1, slot, 2, kc.data(), vc.data(), 1, DType::F8E4M3, 1.0f, 1.0f);
  EXPECT_EQ(kc[0], 0x7E);
  EXPECT_EQ(kc[1], 0xFE);
  write_kv_cache_cpu(k.data(), 2, k.data(), 2, 1, slot, 2, kc.data(), vc.data(), 1, DType::F8E4M3, 8.0f, 8.0f);
  // 2000 / 8 = 250, between 240 (1.875 * 2^7, 0.1110.111) and 256 (2^8, 0.1111.000), nearer 256: read back
  // as 256 * 8 = 2048.
  EXPECT_EQ(kc[0], 0x78);
}

// Every fp8 code reads back as fp32(code) * scale, bit for bit, on the vectorised path (head dim a
// multiple of 16) and the scalar one (head dim 40): with one cached key the softmax weight is
// exactly 1, so the output is the cached V row as the kernel decoded it. e4m3's NaN codes are left
// out (the writer never stores them).
TEST(Fp8Attention, EveryCodeReadsBackAsItsValueTimesTheScale) {
  for (DType dt : {DType::F8E4M3, DType::F8E5M2}) {
    for (int d : {256, 40}) {
      std::vector<uint8_t> kc(static_cast<size_t>(d), 0x38), vc(static_cast<size_t>(d));
      std::vector<float> want(static_cast<size_t>(d));
      const float v_scale = 0.37f;
      for (int x = 0; x < d; ++x) {
        const int code = (x * 41 + (d == 40 ? 7 : 0)) % 256;  // d = 256: every code once
        vc[x] = (dt == DType::F8E4M3 && (code & 0x7F) == 0x7F) ? 0 : static_cast<uint8_t>(code);
        const bool e4m3 = dt == DType::F8E4M3;
        if (e4m3 || (vc[x] & 0x7C) != 0x7C) {  // e5m2's inf / NaN codes: compared below by class
          want[x] = (e4m3 ? fp8_e4m3_to_f32(vc[x]) : fp8_e5m2_to_f32(vc[x])) * v_scale;
        } else {
          want[x] = fp8_e5m2_to_f32(vc[x]);
        }
      }
      const std::vector<float> q(static_cast<size_t>(d), 0.5f);
      std::vector<float> out(static_cast<size_t>(d), -1.0f);
      const int32_t qsl[] = {0, 1}, lens[] = {1}, table[] = {0};
      PagedAttentionParams p;
      p.q = q.data();
      p.ldq = d;
      p.k_cache = kc.data();
      p.v_cache = vc.data();
      p.cache_dtype = dt;
      p.k_scale = 0.5f;
      p.v_scale = v_scale;
      p.num_blocks = 1;
      p.block_size = 1;
      p.num_heads = 1;
      p.num_kv_heads = 1;
      p.head_dim = d;
      p.query_start_loc = qsl;
      p.seq_lens = lens;
      p.block_tables = table;
      p.max_blocks_per_seq = 1;
      p.num_seqs = 1;
      p.out = out.data();
      p.ldo = d;
      paged_attention_cpu(p, nullptr);
      for (int x = 0; x < d; ++x) {
        if (std::isnan(want[x])) {
          EXPECT_TRUE(std::isnan(out[x])) << dtype_name(dt) << " code " << int(vc[x]);
        } else if (std::isinf(want[x])) {
          EXPECT_EQ(out[x], want[x] * v_scale) << dtype_name(dt) << " code " << int(vc[x]);
        } else {
          EXPECT_EQ(out[x], want[x]) << dtype_name(dt) << " d " << d << " code " << int(vc[x]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cypris
