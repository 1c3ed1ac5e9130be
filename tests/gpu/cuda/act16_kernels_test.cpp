// The GPU kernels on 16-bit activations (BF16 and F16, the model dtype on a GPU) against their CPU
// references fed the same rounded inputs: each kernel computes in fp32 and rounds its output once,
// so the normalised error stays within a few 16-bit ulps (< 1e-2). Outputs are poisoned (NaN)
// first and strided rows are used where the models use column slices. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <numeric>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include <cublas_v2.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/rotary.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaAct16)
#ifdef CYPRIS_HAVE_CUDA

constexpr double kTol = 1e-2;

// A device buffer of 16-bit (or fp32) values: upload from Stored bytes, download as fp32.
struct Dev16 {
  DType dtype;
  DevBuf<uint8_t> buf;
  Dev16(const Stored& s, DType t) : dtype(t), buf(s.bytes) {}
  Dev16(size_t n, DType t) : dtype(t), buf(n * dtype_size(t)) { buf.poison(); }
  void* get() const { return buf.get(); }
  std::vector<float> f32() const { return to_f32(buf.download(), dtype); }
};

class CudaAct16 : public ::testing::TestWithParam<DType> {};

TEST_P(CudaAct16, RmsNormAndFusedAddMatchCpu) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  for (int64_t hidden : {64, 100, 4096, 5120, 8192, 20000}) {  // vector and loop paths
    const int64_t rows = 3;
    Stored x = store(randn(rows * hidden, 1), dt);
    Stored res = store(randn(rows * hidden, 2), dt);
    std::vector<float> w = randn(hidden, 3);
    DevBuf<float> dw(w);
    Dev16 dx(x, dt), out(rows * hidden, dt);
    rms_norm_cuda(dx.get(), dt, dw.get(), 1e-5f, rows, hidden, out.get(), nullptr);
    std::vector<float> ref(rows * hidden);
    rms_norm_cpu(x.values.data(), w.data(), 1e-5f, rows, hidden, ref.data(), nullptr);
    EXPECT_LT(norm_err(out.f32(), ref), kTol) << "hidden " << hidden;

    Dev16 dres(res, dt);
    fused_add_rms_norm_cuda(dx.get(), dres.get(), dt, dw.get(), 1e-6f, rows, hidden, nullptr);
    std::vector<float> rx = x.values, rr = res.values;
    fused_add_rms_norm_cpu(rx.data(), rr.data(), w.data(), 1e-6f, rows, hidden, nullptr);
    EXPECT_LT(norm_err(dres.f32(), rr), kTol) << "residual, hidden " << hidden;
    EXPECT_LT(norm_err(dx.f32(), rx), kTol) << "normed, hidden " << hidden;
  }
}

// Cohere's LayerNorm on rounded 16-bit rows (offset means, so the centring counts), written in place.
TEST_P(CudaAct16, LayerNormMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  for (int64_t hidden : {64, 100, 8192}) {
    const int64_t rows = 5;
    std::vector<float> xs = randn(rows * hidden, 4);
    for (float& v : xs) v += 4.0f;
    Stored x = store(xs, dt);
    std::vector<float> w = randn(hidden, 5), b = randn(hidden, 6);
    DevBuf<float> dw(w), db(b);
    for (const bool with_bias : {false, true}) {
      Dev16 dx(x, dt);
      layer_norm_cuda(dx.get(), dt, dw.get(), with_bias ? db.get() : nullptr, 1e-5f, rows, hidden, dx.get(), nullptr);
      std::vector<float> ref(rows * hidden);
      layer_norm_cpu(x.values.data(), w.data(), with_bias ? b.data() : nullptr, 1e-5f, rows, hidden, ref.data(),
                     nullptr);
      EXPECT_LT(norm_err(dx.f32(), ref), kTol) << "hidden " << hidden << (with_bias ? " with bias" : "");
    }
  }
}

TEST_P(CudaAct16, RotaryMatchesCpuOnStridedSlices) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  const int hq = 8, hkv = 2, head_dim = 128, rot_dim = 128;
  const int64_t n = 5, max_pos = 64;
  const int64_t qw = hq * head_dim, ld = (hq + 2 * hkv) * head_dim;  // q | k | v of a fused qkv row
  Stored qkv = store(randn(n * ld, 4), dt);
  std::vector<float> cs(max_pos * rot_dim);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int i = 0; i < rot_dim / 2; ++i) {
      const float a = static_cast<float>(p) / std::pow(10000.0f, 2.0f * i / rot_dim);
      cs[p * rot_dim + i] = std::cos(a);
      cs[p * rot_dim + rot_dim / 2 + i] = std::sin(a);
    }
  }
  std::vector<int32_t> pos = {0, 7, 13, 63, 2};
  std::vector<float> ref = qkv.values;
  rotary_cpu(ref.data(), ld, hq, ref.data() + qw, ld, hkv, head_dim, rot_dim, pos.data(), n, cs.data(), max_pos,
             nullptr);
  Dev16 d(qkv, dt);
  DevBuf<float> dcs(cs);
  DevBuf<int32_t> dpos(pos);
  char* base = static_cast<char*>(d.get());
  rotary_cuda(base, ld, hq, base + qw * dtype_size(dt), ld, hkv, dt, head_dim, rot_dim, dpos.get(), n, dcs.get(),
              max_pos, nullptr);
  EXPECT_LT(norm_err(d.f32(), ref), kTol);
}

TEST_P(CudaAct16, GatedActivationsMatchCpu) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  for (int64_t inter : {64, 100}) {  // 8-wide and scalar paths
    const int64_t n = 7;
    Stored x = store(randn(n * 2 * inter, 5), dt);
    std::vector<float> ref(n * inter);
    Dev16 dx(x, dt), out(n * inter, dt);
    silu_and_mul_cuda(dx.get(), dt, n, inter, out.get(), nullptr);
    silu_and_mul_cpu(x.values.data(), n, inter, ref.data(), nullptr);
    EXPECT_LT(norm_err(out.f32(), ref), kTol) << "silu, inter " << inter;
    Dev16 out2(n * inter, dt);
    gelu_tanh_and_mul_cuda(dx.get(), dt, n, inter, out2.get(), nullptr);
    gelu_tanh_and_mul_cpu(x.values.data(), n, inter, ref.data(), nullptr);
    EXPECT_LT(norm_err(out2.f32(), ref), kTol) << "gelu, inter " << inter;
  }
}

TEST_P(CudaAct16, EmbeddingGatherScatterAndCapMatchCpu) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  const int64_t vocab = 50, hidden = 72, n = 9;
  Stored table = store(randn(vocab * hidden, 6), dt);
  std::vector<int32_t> ids = {0, 3, 49, 7, 7, 12, 1, 30, 2};
  DevBuf<int32_t> dids(ids);
  Dev16 dtab(table, dt), emb(n * hidden, dt);
  embedding_cuda(dids.get(), n, dtab.get(), dt, vocab, hidden, emb.get(), dt, nullptr);
  std::vector<float> ref(n * hidden);
  embedding_cpu(ids.data(), n, table.bytes.data(), dt, vocab, hidden, ref.data(), nullptr);
  EXPECT_EQ(norm_err(emb.f32(), ref), 0.0);  // a row copy: exact

  const std::vector<int32_t> idx = {4, 0, 8};
  DevBuf<int32_t> didx(idx);
  Dev16 rows(idx.size() * hidden, dt);
  gather_rows_cuda(emb.get(), dtype_size(dt), n, hidden, didx.get(), static_cast<int64_t>(idx.size()), rows.get(),
                   nullptr);
  std::vector<float> gref(idx.size() * hidden);
  gather_rows_cpu(ref.data(), n, hidden, idx.data(), static_cast<int64_t>(idx.size()), gref.data());
  EXPECT_EQ(norm_err(rows.f32(), gref), 0.0);

  const std::vector<float> wts = {0.5f, -1.25f, 2.0f};
  DevBuf<float> dwts(wts);
  scatter_add_rows_cuda(rows.get(), dt, static_cast<int64_t>(idx.size()), hidden, didx.get(), dwts.get(), emb.get(),
                        n, nullptr);
  std::vector<float> sref = ref;
  scatter_add_rows_cpu(gref.data(), static_cast<int64_t>(idx.size()), hidden, idx.data(), wts.data(), sref.data(), n);
  EXPECT_LT(norm_err(emb.f32(), sref), kTol);

  std::vector<float> cref = emb.f32();
  scale_and_cap_cuda(emb.get(), dt, n, hidden, hidden, 0.7f, 1.5f, nullptr);
  scale_and_cap_cpu(cref.data(), n, hidden, hidden, 0.7f, 1.5f, nullptr);
  EXPECT_LT(norm_err(emb.f32(), cref), kTol);
}

// x · wᵀ with 16-bit x and w, into a 16-bit or an fp32 output: GEMV rows (m <= 8) and cuBLAS
// (tensor cores straight from the 16-bit activations), strided rows, with and without bias.
TEST_P(CudaAct16, GemmMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  for (int64_t m : {1, 3, 8, 9, 70}) {
    for (DType out_t : {dt, DType::F32}) {
      for (bool with_bias : {false, true}) {
        const int64_t k = 264, n = 136, ldx = k + 8, ldy = n + 8;
        Stored x = store(randn(m * ldx, 7), dt);
        Stored w = store(randn(n * k, 8, 0.2f), dt);
        std::vector<float> bias = randn(n, 9);
        std::vector<float> ref(m * ldy, 0.0f);
        gemm_xwt(x.values.data(), m, k, ldx, w.bytes.data(), dt, n, with_bias ? bias.data() : nullptr, ref.data(),
                 ldy, nullptr);
        Dev16 dx(x, dt), dw(w, dt), dy(m * ldy, out_t);
        DevBuf<float> dbias(bias);
        const size_t sb = gemm_scratch_bytes(m, k, n, dt, dt, out_t, GemmPrecision::Fast);
        DevBuf<uint8_t> scratch(sb);
        gemm_xwt_cuda(h, dx.get(), dt, m, k, ldx, dw.get(), dt, n, with_bias ? dbias.get() : nullptr, dy.get(),
                      out_t, ldy, sb ? scratch.get() : nullptr, GemmPrecision::Fast, nullptr);
        const std::vector<float> got = dy.f32();
        std::vector<float> g, r;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            g.push_back(got[i * ldy + j]);
            r.push_back(ref[i * ldy + j]);
          }
        }
        EXPECT_LT(norm_err(g, r), kTol) << "m " << m << " out " << dtype_name(out_t) << " bias " << with_bias;
      }
    }
  }
  cublasDestroy(h);
}

// fp32 weights (Cohere's centring matrix) with 16-bit activations go through fp32 scratch.
TEST_P(CudaAct16, Fp32WeightsWith16BitActivations) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  for (int64_t m : {2, 20}) {
    const int64_t k = 96, n = 40;
    Stored x = store(randn(m * k, 10), dt);
    std::vector<float> w = randn(n * k, 11, 0.2f);
    std::vector<float> ref(m * n);
    gemm_xwt(x.values.data(), m, k, k, w.data(), DType::F32, n, nullptr, ref.data(), n, nullptr);
    Dev16 dx(x, dt), dy(m * n, dt);
    DevBuf<float> dw(w);
    const size_t sb = gemm_scratch_bytes(m, k, n, dt, DType::F32, dt, GemmPrecision::Fast);
    DevBuf<uint8_t> scratch(sb);
    gemm_xwt_cuda(h, dx.get(), dt, m, k, k, dw.get(), DType::F32, n, nullptr, dy.get(), dt, n,
                  sb ? scratch.get() : nullptr, GemmPrecision::Fast, nullptr);
    EXPECT_LT(norm_err(dy.f32(), ref), kTol) << "m " << m;
  }
  cublasDestroy(h);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaAct16, ::testing::Values(DType::BF16, DType::F16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
