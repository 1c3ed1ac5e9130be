// Quantized dot products and linear layers (kernels/cpu/quant/):
//  - the AVX2 and AVX-512 activation quantizers give the scalar reference's bytes exactly;
//  - every SIMD dot kernel equals the scalar reference up to float summation order, and so does the
//    tiled Q8_0, Q4_0 and Q6_K prefill GEMMs (scalar and AVX-512 VNNI) at every tile edge, and the
//    Q4_0 decode GEMV (four weight rows per pass) at every row edge;
//  - the quantized linear equals an fp64 product of the dequantized weights with the exact
//    activations, within the error bound the 8-bit activations allow (derived below);
//  - the dequantize-then-fp32-GEMM path is exact to fp32 rounding; embedding rows are the
//    dequantized rows bit for bit; bad shapes and types are refused.
// Weights are random blocks (random bytes with sane fp16 scales) and real rows from llama.cpp's
// tiny-random GGUF files. Outputs are poisoned with NaN before each run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/quant/q4_0_gemv.h"
#include "kernels/cpu/quant/q4_0_tiled.h"
#include "kernels/cpu/quant/q6_k_tiled.h"
#include "kernels/cpu/quant/q8_0_acts16.h"
#include "kernels/cpu/quant/q8_0_tiled.h"
#include "kernels/cpu/quant/quant_dot.h"
#include "kernels/cpu/quant/quant_gemm.h"
#include "kernels/cpu/quant/quant_ref.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/mini_gguf.h"
#include "tests/support/quant_weights.h"

namespace cypris {
namespace {

using quant::Isa;
using test::random_weights;

float kNaN() { return std::numeric_limits<float>::quiet_NaN(); }

const DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,  DType::Q2_K,
                        DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS,
                        // GPTQ/AWQ layers repacked at load (kernels/common/wq_blocks.h)
                        DType::W4G32, DType::W4G64, DType::W4G128, DType::W8G32, DType::W8G128};

std::string type_name(const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); }

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  // A few outliers, as real activations have: they set the block scale.
  for (size_t i = 0; i < n; i += 97) v[i] *= 8.0f;
  return v;
}

struct QuantizedActs {
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int16_t> bsum;
  quant::ActRow row() const { return {qs.data(), d.data(), bsum.data()}; }
};

QuantizedActs quantize(quant::QuantizeFn fn, const float* x, int64_t k, int block) {
  QuantizedActs a;
  a.qs.assign(k, 99);
  a.d.assign(k / block, kNaN());
  a.bsum.assign(k / 16, -999);
  fn(x, k, block, a.qs.data(), a.d.data(), a.bsum.data());
  return a;
}

std::vector<Isa> simd_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (quant::isa_available(isa)) out.push_back(isa);
  return out;
}

// y [m rows, stride ldy] of a product over weight rows [j0, j1) of w (n rows of `dtype`, k wide)
// against ref(i, j), the reference dot of activation row i and weight row j (bias included), up to
// float summation order: |got - ref| <= 1e-5 * the sum over c of term(i, c, w[j][c]) (a term's
// magnitude). Outside the range y keeps its NaN poison. label starts the failure message.
void expect_reference_dots(const std::vector<float>& y, int64_t ldy, int64_t m, int64_t n, int64_t k, int64_t j0,
                           int64_t j1, DType dtype, const uint8_t* w,
                           const std::function<double(int64_t i, int64_t c, float wc)>& term,
                           const std::function<float(int64_t i, int64_t j)>& ref, const std::string& label) {
  const size_t row_bytes = dtype_nbytes(dtype, k);
  std::vector<float> wd(k);
  for (int64_t j = 0; j < n; ++j) {
    quant::dequantize_row(dtype, w + j * row_bytes, wd.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      const float got = y[i * ldy + j];
      if (j < j0 || j >= j1) {
        ASSERT_TRUE(std::isnan(got)) << "written outside the range: row " << i << " col " << j;
        continue;
      }
      double mag = 0;
      for (int64_t c = 0; c < k; ++c) mag += term(i, c, wd[c]);
      ASSERT_NEAR(got, ref(i, j), 1e-5 * mag + 1e-6)
          << label << "m=" << m << " k=" << k << " row " << i << " col " << j;
    }
  }
}

// A term's magnitude of a dot with 8-bit activations in blocks of 32.
std::function<double(int64_t, int64_t, float)> q4_term(const std::vector<QuantizedActs>& acts) {
  return [&acts](int64_t i, int64_t c, float wc) { return std::abs(double(wc) * acts[i].d[c / 32] * acts[i].qs[c]); };
}

class QuantKernels : public ::testing::TestWithParam<DType> {};

TEST(QuantActs, SimdQuantizerGivesTheReferenceBytes) {
  if (!quant::isa_available(Isa::Avx2)) GTEST_SKIP() << "no AVX2";
  for (int block : {32, 64, 128, 256}) {  // the weight types' block sizes
    const int64_t k = block * 5;
    std::vector<float> x = randn(k, 7 + block);
    for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero block: d = 0, q = 0
    x[40] = 0.5f * std::abs(x[41]);            // ties are rounded the same way
    const QuantizedActs ref = quantize(quant::quantize_acts_ref, x.data(), k, block);
    const QuantizedActs simd = quantize(quant::quantize_fn(Isa::Avx2), x.data(), k, block);
    EXPECT_EQ(simd.qs, ref.qs) << "block " << block;
    EXPECT_EQ(simd.bsum, ref.bsum) << "block " << block;
    for (size_t b = 0; b < ref.d.size(); ++b) EXPECT_EQ(simd.d[b], ref.d[b]);
  }
}

TEST(QuantActs, ErrorIsAtMostHalfAStep) {
  const int64_t k = 512;
  const std::vector<float> x = randn(k, 3);
  for (int block : {32, 256}) {
    const QuantizedActs a = quantize(quant::quantize_acts_ref, x.data(), k, block);
    for (int64_t i = 0; i < k; ++i) {
      const float d = a.d[i / block];
      EXPECT_LE(std::abs(x[i] - d * a.qs[i]), 0.5f * d * (1 + 1e-5f)) << i;
    }
  }
}

// Every SIMD dot equals the scalar reference: same integer sums per block, only the float
// additions of block results differ in order, so |simd - ref| <= 1e-5 * sum |block terms|.
TEST_P(QuantKernels, SimdDotEqualsScalarReference) {
  const DType t = GetParam();
  const int be = quant::block_elems(t);
  for (int64_t k : {int64_t{be}, int64_t{be} * 3, int64_t{4096}}) {
    const int64_t n = 7;
    const auto w = random_weights(t, n, k, 11 + static_cast<uint32_t>(k));
    std::vector<QuantizedActs> acts;
    std::vector<quant::ActRow> rows;
    for (int r = 0; r < quant::kMaxDotRows; ++r) {
      const auto x = randn(k, 5 + r);
      acts.push_back(quantize(quant::quantize_acts_ref, x.data(), k, quant::act_block(t)));
    }
    for (const auto& a : acts) rows.push_back(a.row());
    std::vector<float> wd(k);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* row = w.data() + j * dtype_nbytes(t, k);
      quant::dequantize_row(t, row, wd.data(), k);
      std::vector<float> ref(rows.size());
      std::vector<double> mag(rows.size());
      for (size_t r = 0; r < rows.size(); ++r) {
        for (int64_t i = 0; i < k; ++i) mag[r] += std::abs(double(wd[i]) * acts[r].d[i / be] * acts[r].qs[i]);
        ref[r] = quant::dot_ref(t, row, rows[r], k);
      }
      for (Isa isa : simd_isas()) {
        // 1..kMaxDotRows distinct activation rows in one call.
        for (int nr = 1; nr <= quant::kMaxDotRows; ++nr) {
          std::vector<float> got(nr, kNaN());
          quant::dot_fn(t, isa)(row, rows.data(), nr, k, got.data());
          for (int r = 0; r < nr; ++r) {
            EXPECT_NEAR(got[r], ref[r], 1e-5 * mag[r] + 1e-30)
                << quant::isa_name(isa) << " k=" << k << " row " << j << " slot " << r << " of " << nr;
          }
        }
      }
    }
  }
}

// The quantized linear against fp64 on the exact activations. With x_i = d_b q_i + e_i and
// |e_i| <= d_b / 2 (round to nearest; d_b = max|x| / 127 over x's block b; for Q8_0 weights, whose
// activations take 16 bits, max|x| / 32767 over x's group of 256: q8_0_acts16.h), the kernels compute
// sum_i w_i (x_i - e_i) up to fp32 rounding, so
//   |y - sum_i w_i x_i| <= sum_i |w_i| d_b(i) / 2  +  1e-5 * sum_i |w_i x_i|
// (the second term covers fp32 accumulation over k <= 4096 and the rounding of x / d).
void check_linear(DType t, int64_t m, int64_t n, int64_t k, QuantPath path, ThreadPool* pool, bool with_bias) {
  const int be = quant::block_elems(t);
  const auto w = random_weights(t, n, k, 100 + static_cast<uint32_t>(m * 7 + n));
  const auto x = randn(m * k, 200 + static_cast<uint32_t>(m));
  const auto bias = randn(n, 300);
  std::vector<float> wd(n * k);
  quant::dequantize_row(t, w.data(), wd.data(), n * k);
  std::vector<float> y(m * n, kNaN());
  quant_gemm_xwt(x.data(), m, k, k, w.data(), t, n, with_bias ? bias.data() : nullptr, y.data(), n, pool, path);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t ab = t == DType::Q8_0 ? quant::kActs16Group : be;  // values per activation scale
    std::vector<double> step((k + ab - 1) / ab);
    for (int64_t b = 0; b < (k + ab - 1) / ab; ++b) {
      double amax = 0;
      for (int64_t c = b * ab; c < std::min(k, (b + 1) * ab); ++c) amax = std::max(amax, double(std::abs(x[i * k + c])));
      step[b] = amax / (t == DType::Q8_0 ? 32767.0 : 127.0);
    }
    for (int64_t j = 0; j < n; ++j) {
      double exact = with_bias ? bias[j] : 0.0, bound = 0, mag = std::abs(exact);
      for (int64_t c = 0; c < k; ++c) {
        const double wv = wd[j * k + c], xv = x[i * k + c];
        exact += wv * xv;
        mag += std::abs(wv * xv);
        bound += std::abs(wv) * step[c / ab] / 2;
      }
      if (path == QuantPath::DequantGemm) bound = 0;  // exact activations: fp32 rounding only
      const double tol = bound * 1.0001 + 1e-5 * mag + 1e-6;
      ASSERT_NEAR(y[i * n + j], exact, tol) << dtype_name(t) << " m=" << m << " row " << i << " col " << j;
    }
  }
}

TEST_P(QuantKernels, LinearMatchesFp64WithinActivationQuantizationBound) {
  const DType t = GetParam();
  const int be = quant::block_elems(t);
  ThreadPool pool(2);
  std::vector<QuantPath> paths = {QuantPath::Auto, QuantPath::Int8Scalar, QuantPath::DequantGemm};
  if (quant::isa_available(Isa::Avx2)) paths.push_back(QuantPath::Int8Avx2);
  if (quant::isa_available(Isa::Avx512)) paths.push_back(QuantPath::Int8Avx512);
  for (QuantPath path : paths) {
    for (int64_t m : {1, 3, 8, 37}) {
      check_linear(t, m, 19, be == 32 ? 160 : 512, path, &pool, m % 2 == 1);
    }
  }
  check_linear(t, 2, 5, be * 2, QuantPath::Auto, nullptr, true);  // no pool
}

// The MoE projection: every run of rows with its own expert's weights, in one call, equals the
// ungrouped product of that run bit for bit (rows are quantized one by one either way; the
// ungrouped product is checked against fp64 above); rows in no run keep their poison.
TEST_P(QuantKernels, GroupedLinearEqualsOneProductPerRun) {
  const DType t = GetParam();
  const int64_t k = quant::block_elems(t) == 32 ? 160 : 512, n = 21, m = 44;
  // Rows 4, 25 and 43 in no run; the run of 17 is a prefill-sized one (Q8_0: the tiled kernel).
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, 2}, {2, 0}, {3, 1}, {5, 9}, {15, 10}, {26, 17}};
  std::vector<std::vector<uint8_t>> w;
  std::vector<GemmGroup> groups;
  for (size_t g = 0; g < runs.size(); ++g) {
    w.push_back(random_weights(t, n, k, 500 + static_cast<uint32_t>(g)));
    groups.push_back({w.back().data(), runs[g].first, runs[g].second});
  }
  const auto x = randn(m * k, 77);
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    std::vector<float> y(m * n, kNaN());
    quant_gemm_xwt_grouped(x.data(), k, k, groups.data(), static_cast<int64_t>(groups.size()), t, n, y.data(), n, p);
    std::vector<float> want(m * n, kNaN());
    for (const GemmGroup& g : groups) {
      quant_gemm_xwt(x.data() + g.first * k, g.rows, k, k, g.w, t, n, nullptr, want.data() + g.first * n, n, &pool);
    }
    for (int64_t i = 0; i < m * n; ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(y[i])) << dtype_name(t) << " row " << i / n << " was written";
      } else {
        ASSERT_EQ(y[i], want[i]) << dtype_name(t) << " row " << i / n << " col " << i % n;
      }
    }
  }
}

TEST_P(QuantKernels, EmbeddingRowsAreTheDequantizedRows) {
  const DType t = GetParam();
  const int64_t vocab = 9, hidden = quant::block_elems(t) * 2;
  const auto table = random_weights(t, vocab, hidden, 42);
  const std::vector<int32_t> ids = {3, 0, 8, 3};
  std::vector<float> out(ids.size() * hidden, kNaN()), want(hidden);
  ThreadPool pool(2);
  quant_embedding(ids.data(), ids.size(), table.data(), t, hidden, out.data(), &pool);
  for (size_t r = 0; r < ids.size(); ++r) {
    quant::dequantize_row(t, table.data() + ids[r] * dtype_nbytes(t, hidden), want.data(), hidden);
    for (int64_t c = 0; c < hidden; ++c) ASSERT_EQ(out[r * hidden + c], want[c]) << r << "," << c;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantKernels, ::testing::ValuesIn(kTypes), type_name);

// Real weights: rows llama.cpp quantized (tiny-random files), every ISA against the reference.
TEST(QuantKernelsGguf, RealRowsAgreeAcrossIsas) {
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/";
  for (const char* name : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
                           "IQ4_XS"}) {
    const test::MiniGguf file(dir + "tiny-random-" + name + ".gguf");
    const test::GgufTensor& t = file.tensor("blk.0.ffn_down.weight");  // [256 rows, 512]
    const DType dt = test::dtype_of_ggml(t.type);
    const int64_t k = static_cast<int64_t>(t.ne[0]);
    const auto x = randn(k, 9);
    const QuantizedActs a = quantize(quant::quantize_acts_ref, x.data(), k, quant::act_block(dt));
    for (int64_t j = 0; j < 16; ++j) {
      const uint8_t* row = file.data(t) + j * dtype_nbytes(dt, k);
      const float ref = quant::dot_ref(dt, row, a.row(), k);
      for (Isa isa : simd_isas()) {
        float got = kNaN();
        const quant::ActRow ar = a.row();
        quant::dot_fn(dt, isa)(row, &ar, 1, k, &got);
        EXPECT_NEAR(got, ref, 1e-5 * std::abs(ref) + 1e-4) << name << " " << quant::isa_name(isa);
      }
    }
  }
}

// The AVX2 16-bit quantizer gives the reference's bytes and scales exactly: random rows with
// outliers, an all-zero group (d = 0, q = 0), a short last group (k = 544), and a group whose
// scale is exactly 1 holding values half-way between two steps (rounded half to even either way).
TEST(QuantActs16, SimdQuantizerGivesTheReferenceBytes) {
  if (!quant::isa_available(Isa::Avx2)) GTEST_SKIP() << "no AVX2";
  const int64_t k = 544, groups = quant::acts16_groups(k);
  std::vector<float> x = randn(k, 55);
  for (int i = 256; i < 512; ++i) x[i] = 0.0f;
  x[512] = 32767.0f;  // the last group's scale: 1
  const float ties[] = {2.5f, 3.5f, -4.5f, -0.5f, 0.5f, 1000.5f, -32766.5f};
  for (int i = 0; i < 7; ++i) x[513 + i] = ties[i];
  std::vector<int16_t> ref(k, 99), got(k, -99);
  std::vector<float> dref(groups, kNaN()), dgot(groups, kNaN());
  quant::quantize_acts16(x.data(), k, ref.data(), dref.data());
  quant::quantize_acts16_fn(Isa::Avx2)(x.data(), k, got.data(), dgot.data());
  EXPECT_EQ(got, ref);
  for (int64_t g = 0; g < groups; ++g) EXPECT_EQ(dgot[g], dref[g]) << g;
  EXPECT_EQ(dref[2], 1.0f);
  EXPECT_EQ(ref[513], 2);
  EXPECT_EQ(ref[515], -4);
}

// Q8_0 with 16-bit activations: the quantizer's step is 1/32767 of the largest value of each group
// of 256 (a short last group included: k = 544 is 2 groups and 32), each value within half a step,
// and every SIMD kernel equals the scalar reference on rows llama.cpp quantized (their first 512
// columns, and a weight row of 544 made from them), for 1 to 8 activation rows at once.
TEST(QuantActs16, QuantizerIsWithinHalfAStepAndKernelsEqualTheReference) {
  const int64_t k = 544, groups = quant::acts16_groups(k);
  ASSERT_EQ(groups, 3);
  constexpr int kRows = quant::kActs16Rows;
  const auto x = randn(kRows * k, 21);
  std::vector<int16_t> qs(kRows * k);
  std::vector<float> d(kRows * groups);
  for (int r = 0; r < kRows; ++r) {
    quant::quantize_acts16(x.data() + r * k, k, qs.data() + r * k, d.data() + r * groups);
  }
  for (int64_t i = 0; i < kRows * k; ++i) {
    const int64_t r = i / k, g = (i % k) / 256;
    double amax = 0;
    for (int64_t c = g * 256; c < std::min(k, (g + 1) * 256); ++c) amax = std::max(amax, double(std::abs(x[r * k + c])));
    const float dg = d[r * groups + g];
    ASSERT_NEAR(dg, amax / 32767.0, amax * 1e-7);
    ASSERT_LE(std::abs(double(qs[i]) * dg - x[i]), dg * 0.5001) << i;
  }
  const test::MiniGguf file(std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q8_0.gguf");
  const test::GgufTensor& t = file.tensor("blk.0.ffn_down.weight");  // [256 rows, 512]
  ASSERT_EQ(t.ne[0], 512u);
  const size_t src_bytes = dtype_nbytes(DType::Q8_0, 512), row_bytes = dtype_nbytes(DType::Q8_0, k);
  quant::ActRow16 rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = {qs.data() + r * k, d.data() + r * groups};
  for (int64_t j = 0; j < 16; ++j) {
    std::vector<uint8_t> w(row_bytes);  // 512 real columns, then the first 32 again
    std::memcpy(w.data(), file.data(t) + j * src_bytes, src_bytes);
    std::memcpy(w.data() + src_bytes, file.data(t) + j * src_bytes, row_bytes - src_bytes);
    const uint8_t* wrow = w.data();
    for (Isa isa : simd_isas()) {
      for (int nr = 1; nr <= kRows; ++nr) {
        std::vector<float> got(kRows, kNaN());
        quant::dot_q8_0_acts16_fn(isa)(wrow, rows, nr, k, got.data());
        for (int r = 0; r < nr; ++r) {
          const float ref = quant::dot_q8_0_acts16_ref(wrow, rows[r], k);
          EXPECT_NEAR(got[r], ref, 1e-5 * std::abs(ref) + 1e-4) << quant::isa_name(isa) << " rows " << nr;
        }
      }
    }
  }
}

// The tiled Q8_0 prefill GEMM (q8_0_tiled.h) equals the scalar reference dot of every (activation
// row, weight row) pair up to float summation order: |got - ref| <= 1e-5 * sum |block terms|. The
// shapes cross every edge of the kernel: activation rows not a multiple of the 4-row tile, weight
// ranges that start inside a panel and end short of one (1, 31, 33 and 45 rows), k of one block, of a
// short last group of 256 (544) and of several groups (800); random blocks and llama.cpp's rows.
// Outside the weight range y keeps its poison; the bias and the output row stride are honoured.
TEST(QuantQ8Tiled, EqualsTheReferenceDotAtEveryTileEdge) {
  std::vector<Isa> isas = {Isa::Scalar};
  if (quant::q8_0_tiled_available(Isa::Avx512)) isas.push_back(Isa::Avx512);
  EXPECT_FALSE(quant::q8_0_tiled_available(Isa::Avx2));
  const test::MiniGguf file(std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q8_0.gguf");
  const test::GgufTensor& real = file.tensor("blk.0.ffn_down.weight");  // [256 rows, 512]
  struct Shape {
    int64_t m, k, n, j0, j1;
    bool real_rows;
  };
  const Shape shapes[] = {{1, 32, 33, 0, 33, false},  {5, 544, 45, 0, 45, false},  {16, 800, 70, 3, 67, false},
                          {7, 256, 31, 0, 31, false}, {37, 512, 96, 33, 34, true}, {18, 512, 64, 0, 64, true}};
  for (const Shape& s : shapes) {
    const size_t row_bytes = dtype_nbytes(DType::Q8_0, s.k);
    std::vector<uint8_t> w = s.real_rows ? std::vector<uint8_t>(file.data(real), file.data(real) + s.n * row_bytes)
                                         : random_weights(DType::Q8_0, s.n, s.k, 600 + static_cast<uint32_t>(s.k));
    const int64_t groups = quant::acts16_groups(s.k);
    const auto x = randn(s.m * s.k, 31 + static_cast<uint32_t>(s.m));
    std::vector<int16_t> qs(s.m * s.k);
    std::vector<float> d(s.m * groups);
    std::vector<quant::ActRow16> rows(s.m);
    for (int64_t r = 0; r < s.m; ++r) {
      quant::quantize_acts16(x.data() + r * s.k, s.k, qs.data() + r * s.k, d.data() + r * groups);
      rows[r] = {qs.data() + r * s.k, d.data() + r * groups};
    }
    const auto bias = randn(s.n, 5);
    for (Isa isa : isas) {
      const int64_t ldy = s.n + 3;
      std::vector<float> y(s.m * ldy, kNaN());
      quant::q8_0_tiled_gemm(rows.data(), s.m, s.k, w.data(), s.j0, s.j1, s.m % 2 ? bias.data() : nullptr, y.data(),
                             ldy, isa);
      ASSERT_NO_FATAL_FAILURE(expect_reference_dots(
          y, ldy, s.m, s.n, s.k, s.j0, s.j1, DType::Q8_0, w.data(),
          [&](int64_t i, int64_t c, float wc) {
            return std::abs(double(wc) * d[i * groups + c / 256] * qs[i * s.k + c]);
          },
          [&](int64_t i, int64_t j) {
            return quant::dot_q8_0_acts16_ref(w.data() + j * row_bytes, rows[i], s.k) + (s.m % 2 ? bias[j] : 0.0f);
          },
          std::string(quant::isa_name(isa)) + " "));
    }
  }
}

// The tiled Q4_0 prefill GEMM (q4_0_tiled.h) against the scalar reference dot, as the Q8_0 one above
// (8-bit activations in blocks of 32; the -8 of every weight comes back through the block sums).
TEST(QuantQ4Tiled, EqualsTheReferenceDotAtEveryTileEdge) {
  std::vector<Isa> isas = {Isa::Scalar};
  if (quant::q4_0_tiled_available(Isa::Avx512)) isas.push_back(Isa::Avx512);
  EXPECT_FALSE(quant::q4_0_tiled_available(Isa::Avx2));
  const test::MiniGguf file(std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q4_0.gguf");
  const test::GgufTensor& real = file.tensor("blk.0.ffn_down.weight");  // [256 rows, 512]
  struct Shape {
    int64_t m, k, n, j0, j1;
    bool real_rows;
  };
  const Shape shapes[] = {{1, 32, 33, 0, 33, false},  {5, 544, 45, 0, 45, false},   {16, 800, 70, 3, 67, false},
                          {7, 256, 31, 0, 31, false}, {37, 512, 96, 33, 34, true}, {18, 512, 64, 0, 64, true}};
  for (const Shape& s : shapes) {
    const size_t row_bytes = dtype_nbytes(DType::Q4_0, s.k);
    std::vector<uint8_t> w = s.real_rows ? std::vector<uint8_t>(file.data(real), file.data(real) + s.n * row_bytes)
                                         : random_weights(DType::Q4_0, s.n, s.k, 700 + static_cast<uint32_t>(s.k));
    const auto x = randn(s.m * s.k, 41 + static_cast<uint32_t>(s.m));
    std::vector<QuantizedActs> acts;
    std::vector<quant::ActRow> rows;
    for (int64_t r = 0; r < s.m; ++r) acts.push_back(quantize(quant::quantize_acts_ref, x.data() + r * s.k, s.k, 32));
    for (const auto& a : acts) rows.push_back(a.row());
    const auto bias = randn(s.n, 6);
    for (Isa isa : isas) {
      const int64_t ldy = s.n + 3;
      std::vector<float> y(s.m * ldy, kNaN());
      quant::q4_0_tiled_gemm(rows.data(), s.m, s.k, w.data(), s.j0, s.j1, s.m % 2 ? bias.data() : nullptr, y.data(),
                             ldy, isa);
      ASSERT_NO_FATAL_FAILURE(expect_reference_dots(
          y, ldy, s.m, s.n, s.k, s.j0, s.j1, DType::Q4_0, w.data(), q4_term(acts),
          [&](int64_t i, int64_t j) {
            return quant::dot_ref(DType::Q4_0, w.data() + j * row_bytes, rows[i], s.k) + (s.m % 2 ? bias[j] : 0.0f);
          },
          std::string(quant::isa_name(isa)) + " "));
    }
  }
}

// The Q4_0 decode GEMV (q4_0_gemv.h) against the scalar reference dot: 1..3 activation rows, weight
// ranges that start and end off a group of four, odd block counts (the single last block), real rows.
TEST(QuantQ4Gemv, EqualsTheReferenceDotAtEveryRowEdge) {
  if (!quant::q4_0_gemv_available(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 VNNI";
  EXPECT_FALSE(quant::q4_0_gemv_available(Isa::Avx2));
  const test::MiniGguf file(std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q4_0.gguf");
  const test::GgufTensor& real = file.tensor("blk.0.ffn_down.weight");  // [256 rows, 512]
  struct Shape {
    int64_t m, k, n, j0, j1;
    bool real_rows;
  };
  const Shape shapes[] = {{1, 32, 5, 0, 5, false},    {1, 96, 9, 1, 8, false},    {2, 544, 13, 2, 13, false},
                          {3, 64, 7, 0, 7, false},    {1, 768, 40, 3, 38, false}, {3, 800, 6, 0, 6, false},
                          {1, 512, 64, 0, 64, true},  {2, 512, 31, 5, 30, true}};
  for (const Shape& s : shapes) {
    const size_t row_bytes = dtype_nbytes(DType::Q4_0, s.k);
    std::vector<uint8_t> w = s.real_rows ? std::vector<uint8_t>(file.data(real), file.data(real) + s.n * row_bytes)
                                         : random_weights(DType::Q4_0, s.n, s.k, 900 + static_cast<uint32_t>(s.k));
    const auto x = randn(s.m * s.k, 61 + static_cast<uint32_t>(s.m));
    std::vector<QuantizedActs> acts;
    std::vector<quant::ActRow> rows;
    for (int64_t r = 0; r < s.m; ++r) acts.push_back(quantize(quant::quantize_acts_ref, x.data() + r * s.k, s.k, 32));
    for (const auto& a : acts) rows.push_back(a.row());
    const auto bias = randn(s.n, 8);
    const bool with_bias = s.n % 2 == 1;
    const int64_t ldy = s.n + 2;
    std::vector<float> y(s.m * ldy, kNaN());
    quant::q4_0_gemv(rows.data(), s.m, s.k, w.data(), s.j0, s.j1, with_bias ? bias.data() : nullptr, y.data(), ldy,
                     Isa::Avx512);
    ASSERT_NO_FATAL_FAILURE(expect_reference_dots(
        y, ldy, s.m, s.n, s.k, s.j0, s.j1, DType::Q4_0, w.data(), q4_term(acts),
        [&](int64_t i, int64_t j) {
          return quant::dot_ref(DType::Q4_0, w.data() + j * row_bytes, rows[i], s.k) + (with_bias ? bias[j] : 0.0f);
        },
        ""));
  }
}

// The tiled Q6_K prefill GEMM (q6_k_tiled.h) against the scalar reference dot: 8-bit activations in
// blocks of 256 (the Q6_K row dot's), 16 sub-block scales per super-block, the -32 of every weight
// back through the group sums. Shapes cross every edge: 1..3 leftover activation rows of a 4-row
// tile, partial panels of 32 weight rows, ranges starting inside a panel, 1..5 super-blocks.
TEST(QuantQ6Tiled, EqualsTheReferenceDotAtEveryTileEdge) {
  std::vector<Isa> isas = {Isa::Scalar};
  if (quant::q6_k_tiled_available(Isa::Avx512)) isas.push_back(Isa::Avx512);
  EXPECT_FALSE(quant::q6_k_tiled_available(Isa::Avx2));
  const test::MiniGguf file(std::string(CYPRIS_TESTDATA_DIR) + "/gguf/tiny-random-Q6_K.gguf");
  const test::GgufTensor& real = file.tensor("blk.0.ffn_down.weight");  // [256 rows, 512]
  ASSERT_EQ(real.ne[0], 512u);
  struct Shape {
    int64_t m, k, n, j0, j1;
    bool real_rows;
  };
  const Shape shapes[] = {{1, 256, 33, 0, 33, false},  {5, 1280, 45, 0, 45, false},  {6, 768, 70, 3, 67, false},
                          {7, 256, 31, 0, 31, false},  {37, 512, 96, 33, 34, true}, {18, 512, 64, 0, 64, true},
                          {4, 512, 100, 30, 100, true}};
  for (const Shape& s : shapes) {
    const size_t row_bytes = dtype_nbytes(DType::Q6_K, s.k);
    std::vector<uint8_t> w = s.real_rows ? std::vector<uint8_t>(file.data(real), file.data(real) + s.n * row_bytes)
                                         : random_weights(DType::Q6_K, s.n, s.k, 900 + static_cast<uint32_t>(s.k));
    const auto x = randn(s.m * s.k, 43 + static_cast<uint32_t>(s.m));
    std::vector<QuantizedActs> acts;
    std::vector<quant::ActRow> rows;
    for (int64_t r = 0; r < s.m; ++r) {
      acts.push_back(quantize(quant::quantize_acts_ref, x.data() + r * s.k, s.k, quant::act_block(DType::Q6_K)));
    }
    for (const auto& a : acts) rows.push_back(a.row());
    const auto bias = randn(s.n, 7);
    std::vector<float> wd(s.k);
    for (Isa isa : isas) {
      const int64_t ldy = s.n + 3;
      std::vector<float> y(s.m * ldy, kNaN());
      quant::q6_k_tiled_gemm(rows.data(), s.m, s.k, w.data(), s.j0, s.j1, s.m % 2 ? bias.data() : nullptr, y.data(),
                             ldy, isa);
      for (int64_t j = 0; j < s.n; ++j) {
        quant::dequantize_row(DType::Q6_K, w.data() + j * row_bytes, wd.data(), s.k);
        for (int64_t i = 0; i < s.m; ++i) {
          const float got = y[i * ldy + j];
          if (j < s.j0 || j >= s.j1) {
            ASSERT_TRUE(std::isnan(got)) << "written outside the range: row " << i << " col " << j;
            continue;
          }
          double mag = 0;
          for (int64_t c = 0; c < s.k; ++c) mag += std::abs(double(wd[c]) * acts[i].d[c / 256] * acts[i].qs[c]);
          const float ref =
              quant::dot_ref(DType::Q6_K, w.data() + j * row_bytes, rows[i], s.k) + (s.m % 2 ? bias[j] : 0.0f);
          ASSERT_NEAR(got, ref, 1e-5 * mag + 1e-6)
              << quant::isa_name(isa) << " m=" << s.m << " k=" << s.k << " row " << i << " col " << j;
        }
      }
    }
  }
}

TEST(QuantKernelsErrors, RefusesBadShapesAndTypes) {
  std::vector<uint8_t> w(dtype_nbytes(DType::Q4_K, 256 * 2));
  std::vector<float> x(300, 1.0f), y(4);
  EXPECT_THROW(quant_gemm_xwt(x.data(), 1, 300, 300, w.data(), DType::Q4_K, 2, nullptr, y.data(), 2, nullptr), Error);
  EXPECT_THROW(quant_gemm_xwt(x.data(), 1, 256, 256, w.data(), DType::F16, 2, nullptr, y.data(), 2, nullptr), Error);
  const int32_t id = 0;
  EXPECT_THROW(quant_embedding(&id, 1, w.data(), DType::Q8_0, 40, y.data(), nullptr), Error);
}

}  // namespace
}  // namespace cypris
