// The bitsandbytes 4-bit weight kernels (DType::NF4G64 / FP4G64, kernels/cpu/quant/bnb_gemm.h): every
// code of both tables is read back exactly (one-hot activations) by the scalar, AVX2 and AVX-512
// dots, in the nibble order of the blocks; the linear layer, on every ISA and through
// quant_gemm_xwt, is within fp32 summation error of a float64 product of the dequantized weights.
#include "kernels/cpu/quant/bnb_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/common/bnb_blocks.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/quant_weights.h"

namespace cypris {
namespace {

const DType kTypes[] = {DType::NF4G64, DType::FP4G64};

std::vector<quant::Isa> isas() {
  std::vector<quant::Isa> v = {quant::Isa::Scalar};
  if (quant::isa_available(quant::Isa::Avx2)) v.push_back(quant::Isa::Avx2);
  if (__builtin_cpu_supports("avx512f")) v.push_back(quant::Isa::Avx512);  // the kernel needs AVX-512 F only
  return v;
}

// bitsandbytes' tables, written here from its get_4bit_type (independent of bnb_blocks.h's).
double table_value(DType t, int q) {
  static const double nf4[16] = {-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                                 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0};
  static const double fp4[8] = {0, 0.0625, 8, 12, 4, 6, 2, 3};
  if (t == DType::NF4G64) return static_cast<float>(nf4[q]);
  return (q & 8 ? -1.0 : 1.0) * static_cast<double>(static_cast<float>(fp4[q & 7]) / 12.0f);
}

TEST(BnbGemm, OneHotActivationsReadEveryCodeBackExactlyInElementOrder) {
  // Row j, element i holds code (i + j) % 16 with absmax 0.5 * (j + 1) (a power-of-two multiple of a
  // small integer: the products are exact).
  const int64_t n = 16, k = 128;
  for (DType t : kTypes) {
    std::vector<uint8_t> w(dtype_nbytes(t, n * k));
    auto* b = reinterpret_cast<quant::BlockB4*>(w.data());
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t blk = 0; blk < k / 64; ++blk) {
        quant::BlockB4& B = b[j * (k / 64) + blk];
        B.d = 0.5f * static_cast<float>(j + 1);
        for (int i = 0; i < 32; ++i) {
          const int lo = static_cast<int>((blk * 64 + i + j) % 16), hi = static_cast<int>((blk * 64 + 32 + i + j) % 16);
          B.qs[i] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
    }
    for (quant::Isa isa : isas()) {
      for (int64_t i = 0; i < k; i += 7) {
        std::vector<float> x(static_cast<size_t>(k), 0.0f), y(static_cast<size_t>(n));
        x[static_cast<size_t>(i)] = 1.0f;
        b4_gemm_xwt(x.data(), 1, k, k, w.data(), t, n, nullptr, y.data(), n, nullptr, isa);
        for (int64_t j = 0; j < n; ++j) {
          const double want = table_value(t, static_cast<int>((i + j) % 16)) * 0.5 * static_cast<double>(j + 1);
          EXPECT_EQ(y[static_cast<size_t>(j)], static_cast<float>(want))
              << dtype_name(t) << " " << quant::isa_name(isa) << " element " << i << " row " << j;
        }
      }
    }
    // dequantize_row gives the same values.
    std::vector<float> deq(static_cast<size_t>(k));
    quant::dequantize_row(t, w.data() + dtype_nbytes(t, k) * 3, deq.data(), k);
    for (int64_t i = 0; i < k; ++i)
      EXPECT_EQ(deq[static_cast<size_t>(i)], static_cast<float>(table_value(t, static_cast<int>((i + 3) % 16)) * 2.0));
  }
}

// |y - Σ w x| <= 1e-5 Σ |w x| (fp32 sums of at most a few hundred terms), per output.
TEST(BnbGemm, LinearIsWithinFloatSummationErrorOfFloat64) {
  ThreadPool pool(2);
  const int64_t n = 40, k = 256;
  for (DType t : kTypes) {
    const std::vector<uint8_t> w = test::random_weights(t, n, k, 7);
    std::vector<float> wf(static_cast<size_t>(n * k));
    quant::dequantize_row(t, w.data(), wf.data(), n * k);
    for (int64_t m : {1, 3, 8, 37}) {
      std::mt19937 g(static_cast<uint32_t>(m));
      std::normal_distribution<float> nd;
      std::vector<float> x(static_cast<size_t>(m * k)), bias(static_cast<size_t>(n));
      for (auto& v : x) v = nd(g);
      for (auto& v : bias) v = nd(g);
      for (quant::Isa isa : isas()) {
        std::vector<float> y(static_cast<size_t>(m * n));
        b4_gemm_xwt(x.data(), m, k, k, w.data(), t, n, bias.data(), y.data(), n, &pool, isa);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = bias[static_cast<size_t>(j)], mag = std::abs(ref);
            for (int64_t c = 0; c < k; ++c) {
              const double p = static_cast<double>(wf[static_cast<size_t>(j * k + c)]) * x[static_cast<size_t>(i * k + c)];
              ref += p;
              mag += std::abs(p);
            }
            EXPECT_NEAR(y[static_cast<size_t>(i * n + j)], ref, 1e-5 * mag)
                << dtype_name(t) << " " << quant::isa_name(isa) << " m=" << m << " [" << i << ", " << j << "]";
          }
        }
      }
      // The backend's entry point sends these types here too.
      std::vector<float> y(static_cast<size_t>(m * n)), z(static_cast<size_t>(m * n));
      quant_gemm_xwt(x.data(), m, k, k, w.data(), t, n, bias.data(), y.data(), n, &pool);
      b4_gemm_xwt(x.data(), m, k, k, w.data(), t, n, bias.data(), z.data(), n, &pool, quant::best_isa());
      EXPECT_EQ(y, z) << dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace cypris
