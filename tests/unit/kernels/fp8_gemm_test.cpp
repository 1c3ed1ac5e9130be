// The FP8 weight kernels (DType::F8G128, kernels/cpu/quant/fp8_gemm.h): the scalar and AVX2 dots
// decode every e4m3 code to its value (one-hot activations read single weights back exactly), and
// the linear layer, through quant_gemm_xwt's paths, is within fp32 summation error of a float64
// product of the dequantized weights.
#include "kernels/cpu/quant/fp8_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/fp8.h"
#include "kernels/common/fp8_blocks.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "kernels/cpu/thread_pool.h"

namespace cypris {
namespace {

// n rows of k random FP8 weights: every finite code, block scales spread over 2^-12..2^-4.
std::vector<uint8_t> random_f8(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> w(dtype_nbytes(DType::F8G128, n * k));
  auto* b = reinterpret_cast<quant::BlockF8*>(w.data());
  std::uniform_real_distribution<float> e(-12.0f, -4.0f);
  for (int64_t i = 0; i < n * k / quant::kF8Block; ++i) {
    b[i].d = std::exp2(e(g)) * (1.0f + static_cast<float>(g() % 1000) / 1000.0f);
    for (auto& q : b[i].qs) {
      do q = static_cast<uint8_t>(g());
      while ((q & 0x7f) == 0x7f);
    }
  }
  return w;
}

TEST(Fp8Gemm, OneHotActivationsReadEveryCodeBackExactly) {
  // Row j holds codes 2j and 2j + 1 repeated, so the 256 codes (NaNs replaced by 0) all appear.
  const int64_t n = 128, k = 128;
  std::vector<uint8_t> w(dtype_nbytes(DType::F8G128, n * k));
  auto* b = reinterpret_cast<quant::BlockF8*>(w.data());
  for (int64_t j = 0; j < n; ++j) {
    b[j].d = 0.375f * static_cast<float>(j + 1);
    for (int i = 0; i < k; ++i) {
      const uint8_t c = static_cast<uint8_t>(2 * j + (i % 2));
      b[j].qs[i] = (c & 0x7f) == 0x7f ? 0 : c;
    }
  }
  std::vector<float> deq(static_cast<size_t>(n * k));
  quant::dequantize_row(DType::F8G128, w.data(), deq.data(), n * k);
  for (int64_t j = 0; j < n; ++j) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(deq[j * k + i], fp8_e4m3_to_f32(b[j].qs[i]) * b[j].d) << "row " << j;
    }
  }
  for (QuantPath path : {QuantPath::Int8Scalar, QuantPath::Int8Avx2}) {
    if (path == QuantPath::Int8Avx2 && !quant::isa_available(quant::Isa::Avx2)) continue;
    for (int col = 0; col < 2; ++col) {
      std::vector<float> x(static_cast<size_t>(k), 0.0f), y(static_cast<size_t>(n));
      x[col] = 1.0f;
      quant_gemm_xwt(x.data(), 1, k, k, w.data(), DType::F8G128, n, nullptr, y.data(), n, nullptr, path);
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(y[j], deq[j * k + col]) << "row " << j << " column " << col;
    }
  }
}

TEST(Fp8Gemm, LinearIsWithinFp32SummationErrorOfTheFloat64Product) {
  ThreadPool pool(2);
  const int64_t n = 96, k = 384;
  const std::vector<uint8_t> w = random_f8(n, k, 7);
  std::vector<float> deq(static_cast<size_t>(n * k));
  quant::dequantize_row(DType::F8G128, w.data(), deq.data(), n * k);
  std::vector<float> bias(static_cast<size_t>(n));
  std::mt19937 g(11);
  std::normal_distribution<float> nd;
  for (auto& v : bias) v = nd(g);
  for (int64_t m : {1, 3, 8, 37}) {
    std::vector<float> x(static_cast<size_t>(m * k));
    for (auto& v : x) v = nd(g);
    for (QuantPath path : {QuantPath::Auto, QuantPath::Int8Scalar, QuantPath::Int8Avx2, QuantPath::DequantGemm}) {
      if (path == QuantPath::Int8Avx2 && !quant::isa_available(quant::Isa::Avx2)) continue;
      std::vector<float> y(static_cast<size_t>(m * n), std::nanf(""));
      quant_gemm_xwt(x.data(), m, k, k, w.data(), DType::F8G128, n, bias.data(), y.data(), n, &pool, path);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double ref = bias[j], mag = std::abs(bias[j]);
          for (int64_t c = 0; c < k; ++c) {
            ref += static_cast<double>(deq[j * k + c]) * x[i * k + c];
            mag += std::abs(static_cast<double>(deq[j * k + c]) * x[i * k + c]);
          }
          // fp32 sums of at most 128 + k / 128 + 1 terms: |error| <= ~(k/128 + 130) 2^-24 sum |w x|.
          EXPECT_LE(std::abs(y[i * n + j] - ref), 1e-5 * mag) << "m " << m << " row " << i << " col " << j;
        }
      }
    }
  }
}

TEST(Fp8Gemm, GroupedEqualsOneLinearPerGroup) {
  const int64_t n = 32, k = 256, m = 7;
  const std::vector<uint8_t> w0 = random_f8(n, k, 1), w1 = random_f8(n, k, 2);
  std::vector<float> x(static_cast<size_t>(m * k));
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  const GemmGroup groups[] = {{w0.data(), 0, 3}, {w1.data(), 3, 4}};
  std::vector<float> y(static_cast<size_t>(m * n)), want(static_cast<size_t>(m * n));
  quant_gemm_xwt_grouped(x.data(), k, k, groups, 2, DType::F8G128, n, y.data(), n, nullptr);
  quant_gemm_xwt(x.data(), 3, k, k, w0.data(), DType::F8G128, n, nullptr, want.data(), n, nullptr);
  quant_gemm_xwt(x.data() + 3 * k, 4, k, k, w1.data(), DType::F8G128, n, nullptr, want.data() + 3 * n, n, nullptr);
  EXPECT_EQ(y, want);
}

TEST(Fp8Gemm, RowsThatAreNotWholeBlocksAreRefused) {
  std::vector<uint8_t> w(dtype_nbytes(DType::F8G128, 128));
  std::vector<float> x(64), y(1);
  EXPECT_THROW(quant_gemm_xwt(x.data(), 1, 64, 64, w.data(), DType::F8G128, 1, nullptr, y.data(), 1, nullptr), Error);
}

}  // namespace
}  // namespace cypris
