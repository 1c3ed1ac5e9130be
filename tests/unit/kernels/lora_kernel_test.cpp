// LoRA's grouped product on the CPU (kernels/cpu/lora.h) against a float64 loop written from the
// definition out[r] += scale[s] * (x[r] · A[s]ᵀ) · B[s]ᵀ: rows of several adapters, of the base
// model (slot -1) and of an adapter slot whose scale is 0, strided input and output, batch sizes
// around the thread count (the kernel splits columns when rows are few).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/lora.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

struct Case {
  int64_t t, r, k, n, l;
};

void run_case(const Case& c, ThreadPool* pool) {
  std::mt19937 rng(static_cast<uint32_t>(c.t * 131 + c.k * 7 + c.n));
  std::normal_distribution<float> nd;
  const int64_t ldx = c.k + 3, ldo = c.n + 5;  // column slices of wider buffers
  std::vector<float> x(static_cast<size_t>(c.t * ldx)), a(static_cast<size_t>(c.l * c.r * c.k)),
      b(static_cast<size_t>(c.l * c.n * c.r)), out(static_cast<size_t>(c.t * ldo));
  for (auto* v : {&x, &a, &b, &out}) {
    for (float& e : *v) e = nd(rng);
  }
  std::vector<float> scales(static_cast<size_t>(c.l));
  for (int64_t s = 0; s < c.l; ++s) scales[static_cast<size_t>(s)] = 0.5f + static_cast<float>(s);
  scales.back() = 0.0f;  // a slot without this projection
  std::vector<int32_t> slots(static_cast<size_t>(c.t));
  for (int64_t i = 0; i < c.t; ++i) slots[static_cast<size_t>(i)] = static_cast<int32_t>(i % (c.l + 1)) - 1;
  std::vector<double> want(out.begin(), out.end());
  for (int64_t i = 0; i < c.t; ++i) {
    const int s = slots[static_cast<size_t>(i)];
    if (s < 0) continue;
    for (int64_t col = 0; col < c.n; ++col) {
      double acc = 0;
      for (int64_t j = 0; j < c.r; ++j) {
        double shrink = 0;
        for (int64_t q = 0; q < c.k; ++q) shrink += double(a[size_t((s * c.r + j) * c.k + q)]) * x[size_t(i * ldx + q)];
        acc += shrink * b[size_t((s * c.n + col) * c.r + j)];
      }
      want[size_t(i * ldo + col)] += scales[size_t(s)] * acc;
    }
  }
  std::vector<float> got = out;
  lora_bgmv_f32(x.data(), ldx, slots.data(), c.t, a.data(), b.data(), scales.data(), c.r, c.k, c.n, got.data(), ldo,
                pool);
  double err = 0, mag = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    err = std::max(err, std::abs(got[e] - want[e]));
    mag = std::max(mag, std::abs(want[e]));
  }
  EXPECT_LT(err / mag, 1e-5) << "t " << c.t << " r " << c.r << " k " << c.k << " n " << c.n;
  // Padding columns past n stay as they were.
  for (int64_t i = 0; i < c.t; ++i) {
    for (int64_t col = c.n; col < ldo; ++col) ASSERT_EQ(got[size_t(i * ldo + col)], out[size_t(i * ldo + col)]);
  }
}

TEST(LoraKernel, MatchesFloat64DefinitionForMixedSlots) {
  ThreadPool pool(2);
  for (const Case& c : {Case{1, 4, 32, 48, 2}, Case{3, 8, 64, 200, 3}, Case{8, 16, 96, 130, 4}, Case{33, 2, 17, 9, 2},
                        Case{5, 16, 256, 1000, 5}}) {
    run_case(c, &pool);
    run_case(c, nullptr);
  }
}

TEST(LoraKernel, BaseRowsAreUntouched) {
  ThreadPool pool(2);
  std::vector<float> x(4 * 8, 1.0f), a(1 * 2 * 8, 1.0f), b(1 * 6 * 2, 1.0f), out(4 * 6, 3.0f), scales = {1.0f};
  std::vector<int32_t> slots = {-1, 0, -1, -1};
  lora_bgmv_f32(x.data(), 8, slots.data(), 4, a.data(), b.data(), scales.data(), 2, 8, 6, out.data(), 6, &pool);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(out[size_t(i * 6 + c)], i == 1 ? 3.0f + 16.0f : 3.0f);
  }
}

}  // namespace
}  // namespace cypris
