// Every CUDA kernel family against its CPU reference in kernels/cpu/, on fresh random inputs with
// the GPU output poisoned (NaN) before each run. Normalised error: fp32 < 1e-5; the tensor-core
// GEMM, which rounds activations to 16 bits, < 1e-2. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <numeric>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/cache_ops.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rotary.h"
#include "kernels/cuda/sampling.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaKernels)
#ifdef CYPRIS_HAVE_CUDA

constexpr double kF32Tol = 1e-5;
constexpr double kHalfTol = 1e-2;

class EmbeddingDtype : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingDtype, MatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  const int64_t vocab = 300, hidden = 72, n = 37;
  Stored table = store(randn(vocab * hidden, 1), dt);
  std::vector<int32_t> ids(n);
  std::mt19937 g(2);
  for (auto& id : ids) id = static_cast<int32_t>(g() % vocab);
  std::vector<float> ref(n * hidden);
  embedding_cpu(ids.data(), n, table.bytes.data(), dt, vocab, hidden, ref.data(), nullptr);
  DevBuf<uint8_t> dtable(table.bytes);
  DevBuf<int32_t> dids(ids);
  DevBuf<float> out(n * hidden);
  out.poison();
  embedding_cuda(dids.get(), n, dtable.get(), dt, vocab, hidden, out.get(), DType::F32, nullptr);
  EXPECT_LT(norm_err(out.download(), ref), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingDtype, ::testing::Values(DType::F32, DType::F16, DType::BF16));

TEST(CudaKernels, GatherRowsMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const int64_t rows = 50, hidden = 130;
  std::vector<float> x = randn(rows * hidden, 3);
  std::vector<int32_t> idx = {49, 0, 7, 7, 23};
  std::vector<float> ref(idx.size() * hidden);
  gather_rows_cpu(x.data(), rows, hidden, idx.data(), static_cast<int64_t>(idx.size()), ref.data());
  DevBuf<float> dx(x);
  DevBuf<int32_t> didx(idx);
  DevBuf<float> out(ref.size());
  out.poison();
  gather_rows_cuda(dx.get(), sizeof(float), rows, hidden, didx.get(), static_cast<int64_t>(idx.size()), out.get(), nullptr);
  EXPECT_LT(norm_err(out.download(), ref), kF32Tol);
}

class RmsNormSize : public ::testing::TestWithParam<int64_t> {};

TEST_P(RmsNormSize, PlainAndFusedMatchCpu) {
  CYPRIS_REQUIRE_GPU();
  const int64_t hidden = GetParam(), rows = 19;
  std::vector<float> x = randn(rows * hidden, 4, 3.0f);
  std::vector<float> res = randn(rows * hidden, 5);
  std::vector<float> w = randn(hidden, 6);
  std::vector<float> ref(x.size());
  rms_norm_cpu(x.data(), w.data(), 1e-5f, rows, hidden, ref.data(), nullptr);
  DevBuf<float> dx(x), dw(w), out(x.size());
  out.poison();
  rms_norm_cuda(dx.get(), DType::F32, dw.get(), 1e-5f, rows, hidden, out.get(), nullptr);
  EXPECT_LT(norm_err(out.download(), ref), kF32Tol);

  std::vector<float> xr = x, rr = res;
  fused_add_rms_norm_cpu(xr.data(), rr.data(), w.data(), 1e-6f, rows, hidden, nullptr);
  DevBuf<float> dres(res);
  fused_add_rms_norm_cuda(dx.get(), dres.get(), DType::F32, dw.get(), 1e-6f, rows, hidden, nullptr);
  EXPECT_LT(norm_err(dx.download(), xr), kF32Tol);
  EXPECT_LT(norm_err(dres.download(), rr), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Sizes, RmsNormSize, ::testing::Values(8, 64, 100, 4096, 5000));

struct RotaryCase {
  int head_dim, rot_dim, hq, hkv;
};

class Rotary : public ::testing::TestWithParam<RotaryCase> {};

TEST_P(Rotary, MatchesCpuOnStridedSlices) {
  CYPRIS_REQUIRE_GPU();
  const RotaryCase c = GetParam();
  const int64_t n = 23, max_pos = 64;
  const int64_t qw = int64_t{c.hq} * c.head_dim, kw = int64_t{c.hkv} * c.head_dim;
  const int64_t ld = qw + 2 * kw;  // q and k live inside one fused qkv row
  std::vector<float> qkv = randn(n * ld, 7);
  std::vector<float> cs = randn(max_pos * c.rot_dim, 8);
  std::vector<int32_t> pos(n);
  for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>((t * 5 + 3) % max_pos);
  std::vector<float> ref = qkv;
  rotary_cpu(ref.data(), ld, c.hq, ref.data() + qw, ld, c.hkv, c.head_dim, c.rot_dim, pos.data(), n, cs.data(),
             max_pos, nullptr);
  DevBuf<float> d(qkv), dcs(cs);
  DevBuf<int32_t> dpos(pos);
  rotary_cuda(d.get(), ld, c.hq, d.get() + qw, ld, c.hkv, DType::F32, c.head_dim, c.rot_dim, dpos.get(), n, dcs.get(), max_pos,
              nullptr);
  EXPECT_LT(norm_err(d.download(), ref), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Rotary,
                         ::testing::Values(RotaryCase{8, 8, 4, 2}, RotaryCase{64, 64, 8, 8}, RotaryCase{128, 64, 4, 1},
                                           RotaryCase{128, 128, 32, 8}));

TEST(CudaKernels, SiluAndMulMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const int64_t n = 17, inter = 343;
  std::vector<float> x = randn(n * 2 * inter, 9, 2.0f);
  std::vector<float> ref(n * inter);
  silu_and_mul_cpu(x.data(), n, inter, ref.data(), nullptr);
  DevBuf<float> dx(x), out(ref.size());
  out.poison();
  silu_and_mul_cuda(dx.get(), DType::F32, n, inter, out.get(), nullptr);
  EXPECT_LT(norm_err(out.download(), ref), kF32Tol);
}

TEST(CudaKernels, ScatterAddRowsMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const int64_t rows_out = 50, hidden = 300, count = 17;
  std::vector<float> out = randn(rows_out * hidden, 35);
  std::vector<float> src = randn(count * hidden, 36);
  std::vector<float> w = randn(count, 37);
  std::vector<int32_t> idx(rows_out);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), std::mt19937(38));
  idx.resize(count);
  std::vector<float> ref = out;
  scatter_add_rows_cpu(src.data(), count, hidden, idx.data(), w.data(), ref.data(), rows_out);
  DevBuf<float> dsrc(src), dw(w), dout(out);
  DevBuf<int32_t> didx(idx);
  scatter_add_rows_cuda(dsrc.get(), DType::F32, count, hidden, didx.get(), dw.get(), dout.get(), rows_out, nullptr);
  EXPECT_LT(norm_err(dout.download(), ref), kF32Tol);
}

TEST(CudaKernels, GeluTanhAndMulMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const int64_t n = 17, inter = 343;
  std::vector<float> x = randn(n * 2 * inter, 31, 3.0f);
  std::vector<float> ref(n * inter);
  gelu_tanh_and_mul_cpu(x.data(), n, inter, ref.data(), nullptr);
  DevBuf<float> dx(x), out(ref.size());
  out.poison();
  gelu_tanh_and_mul_cuda(dx.get(), DType::F32, n, inter, out.get(), nullptr);
  EXPECT_LT(norm_err(out.download(), ref), kF32Tol);
}

// Per-head RMSNorm on the q slice of a fused qkv row (strided), head_dim 128 and an odd one.
TEST(CudaKernels, RmsNormHeadsMatchesCpuOnStridedSlices) {
  CYPRIS_REQUIRE_GPU();
  for (int d : {128, 40}) {
    const int64_t rows = 21, heads = 6, ld = heads * d + 3 * d;
    std::vector<float> x = randn(rows * ld, 32, 2.0f);
    std::vector<float> w = randn(d, 33);
    std::vector<float> ref = x;
    rms_norm_heads_cpu(ref.data(), ld, rows, heads, d, w.data(), 1e-6f, nullptr);
    DevBuf<float> dx(x), dw(w);
    rms_norm_heads_cuda(dx.get(), DType::F32, ld, rows, heads, d, dw.get(), 1e-6f, nullptr);
    EXPECT_LT(norm_err(dx.download(), ref), kF32Tol) << "head_dim " << d;  // the k/v columns stay untouched
  }
}

// Command R+'s per-head LayerNorm: one weight row per head; an offset mean makes the centring count.
TEST(CudaKernels, LayerNormHeadsMatchesCpuOnStridedSlices) {
  CYPRIS_REQUIRE_GPU();
  for (int d : {128, 40}) {
    const int64_t rows = 21, heads = 6, ld = heads * d + 3 * d;
    std::vector<float> x = randn(rows * ld, 35, 2.0f);
    for (float& v : x) v += 3.0f;
    std::vector<float> w = randn(heads * d, 36);
    std::vector<float> ref = x;
    layer_norm_heads_cpu(ref.data(), ld, rows, heads, d, w.data(), 1e-5f, nullptr);
    DevBuf<float> dx(x), dw(w);
    layer_norm_heads_cuda(dx.get(), DType::F32, ld, rows, heads, d, dw.get(), 1e-5f, nullptr);
    EXPECT_LT(norm_err(dx.download(), ref), kF32Tol) << "head_dim " << d;
  }
}

// Whole-row LayerNorm (Cohere's norms), with and without bias, rows of one element to past 1024
// threads' worth; offset means make the centring count.
TEST(CudaKernels, LayerNormMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  for (int64_t hidden : {int64_t{1}, int64_t{40}, int64_t{4096}, int64_t{12288}}) {
    const int64_t rows = 13;
    std::vector<float> x = randn(rows * hidden, 37, 2.0f);
    for (float& v : x) v += 10.0f;
    const std::vector<float> w = randn(hidden, 38), b = randn(hidden, 39);
    DevBuf<float> dx(x), dw(w), db(b);
    for (const bool with_bias : {false, true}) {
      std::vector<float> ref(x.size());
      layer_norm_cpu(x.data(), w.data(), with_bias ? b.data() : nullptr, 1e-5f, rows, hidden, ref.data(), nullptr);
      DevBuf<float> out(x.size());
      out.poison();
      layer_norm_cuda(dx.get(), DType::F32, dw.get(), with_bias ? db.get() : nullptr, 1e-5f, rows, hidden, out.get(),
                      nullptr);
      EXPECT_LT(norm_err(out.download(), ref), kF32Tol) << "hidden " << hidden << (with_bias ? " with bias" : "");
    }
  }
}

TEST(CudaKernels, ScaleAndCapMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const int64_t rows = 9, cols = 1000, ld = 1010;
  for (float cap : {0.0f, 30.0f}) {
    std::vector<float> x = randn(rows * ld, 34, 50.0f);
    std::vector<float> ref = x;
    scale_and_cap_cpu(ref.data(), rows, cols, ld, 0.5f, cap, nullptr);
    DevBuf<float> dx(x);
    scale_and_cap_cuda(dx.get(), DType::F32, rows, cols, ld, 0.5f, cap, nullptr);
    EXPECT_LT(norm_err(dx.download(), ref), kF32Tol) << "cap " << cap;
  }
}

struct GemmCase {
  int64_t m, k, n;
  DType dtype;
  bool bias;
  GemmPrecision precision;
};

class Gemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(Gemm, MatchesCpuGemm) {
  CYPRIS_REQUIRE_GPU();
  const GemmCase c = GetParam();
  const int64_t ldx = c.k + 4, ldy = c.n + 3;  // strided rows, as column slices are
  std::vector<float> x = randn(c.m * ldx, 10);
  Stored w = store(randn(c.n * c.k, 11, 0.2f), c.dtype);
  std::vector<float> bias = randn(c.n, 12);
  std::vector<float> ref(c.m * ldy, 0.0f), got_init(c.m * ldy, 0.0f);
  gemm_xwt(x.data(), c.m, c.k, ldx, w.bytes.data(), c.dtype, c.n, c.bias ? bias.data() : nullptr, ref.data(), ldy,
           nullptr);
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  DevBuf<float> dx(x), dbias(bias), dy(c.m * ldy);
  DevBuf<uint8_t> dw(w.bytes);
  dy.poison();
  const size_t scratch_bytes = gemm_scratch_bytes(c.m, c.k, c.n, DType::F32, c.dtype, DType::F32, c.precision);
  DevBuf<uint8_t> scratch(scratch_bytes);
  gemm_xwt_cuda(h, dx.get(), DType::F32, c.m, c.k, ldx, dw.get(), c.dtype, c.n, c.bias ? dbias.get() : nullptr, dy.get(),
                DType::F32, ldy,
                scratch_bytes ? scratch.get() : nullptr, c.precision, nullptr);
  std::vector<float> got = dy.download();
  cublasDestroy(h);
  // Compare only the written columns; the row padding stays poisoned.
  std::vector<float> g, r;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      g.push_back(got[i * ldy + j]);
      r.push_back(ref[i * ldy + j]);
    }
  }
  const bool rounded = c.dtype != DType::F32 && c.m > kGemvMaxRows && c.precision == GemmPrecision::Fast;
  EXPECT_LT(norm_err(g, r), rounded ? kHalfTol : kF32Tol);
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> out;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t m : {1, 3, 8, 9, 70}) {
      for (GemmPrecision p : {GemmPrecision::Fast, GemmPrecision::Fp32}) {
        out.push_back({m, 256, 200, dt, m % 2 == 1, p});
        out.push_back({m, 100, 33, dt, true, p});  // k not a multiple of 8: the scalar GEMV path
      }
    }
  }
  out.push_back({1, 4096, 1024, DType::BF16, false, GemmPrecision::Fast});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gemm, ::testing::ValuesIn(gemm_cases()));

constexpr DType kIoTypes[] = {DType::F32, DType::BF16, DType::F16};
constexpr DType kCacheTypes[] = {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2};

// Values `dtype` represents exactly (fp32 rounded through it), so the CPU reference sees what the GPU reads.
std::vector<float> rounded_to(const std::vector<float>& v, DType dtype) { return store(v, dtype).values; }

// Every io type x cache type, vector (width a multiple of 8, aligned rows) and scalar (odd width) paths,
// a width over one block's 1024 elements, padding slots skipped: the cache bytes equal
// write_kv_cache_cpu's over the same (io-rounded) values, and bytes outside the written slots stay.
TEST(CudaKernels, ReshapeAndCacheMatchesCpuForEveryIoAndCacheTypeAndSkipsPadding) {
  CYPRIS_REQUIRE_GPU();
  const int64_t num_slots = 24, n = 9;
  const std::vector<int64_t> slots = {5, 0, -1, 23, 7, 8, -1, 12, 2};
  DevBuf<int64_t> dslots(slots);
  for (const int64_t width : {int64_t{24}, int64_t{13}, int64_t{2056}}) {
    const int64_t ld = 3 * width;
    for (const DType io : kIoTypes) {
      for (const DType cache : kCacheTypes) {
        SCOPED_TRACE(testing::Message() << "width " << width << " io " << dtype_name(io) << " cache "
                                        << dtype_name(cache));
        const std::vector<float> kv = rounded_to(randn(n * ld, 13, 8.0f), io);
        const size_t esz = dtype_size(cache);
        std::vector<uint8_t> kref(num_slots * width * esz, 0x5A), vref = kref;
        write_kv_cache_cpu(kv.data(), ld, kv.data() + width, ld, n, slots.data(), width, kref.data(), vref.data(),
                           num_slots, cache, 0.5f, 3.0f);
        std::vector<uint8_t> kv_io(kv.size() * dtype_size(io));
        convert_from_f32(kv.data(), io, kv_io.data(), static_cast<int64_t>(kv.size()));
        DevBuf<uint8_t> dkv(kv_io);
        DevBuf<uint8_t> dk(std::vector<uint8_t>(kref.size(), 0x5A)), dv(std::vector<uint8_t>(kref.size(), 0x5A));
        reshape_and_cache_cuda(dkv.get(), ld, dkv.get() + width * dtype_size(io), ld, io, n, dslots.get(), width,
                               dk.get(), dv.get(), num_slots, nullptr, cache, 0.5f, 3.0f);
        EXPECT_EQ(dk.download(), kref);
        EXPECT_EQ(dv.download(), vref);
      }
    }
  }
}

TEST(CudaKernels, CopyBlocksCopiesEveryCacheTensor) {
  CYPRIS_REQUIRE_GPU();
  for (int64_t block_elems : {int64_t{64}, int64_t{6}}) {  // 16-byte and 4-byte copy paths
    const int64_t blocks = 8;
    std::vector<std::vector<float>> host;
    std::vector<std::unique_ptr<DevBuf<float>>> dev;
    std::vector<uint64_t> ptrs;
    for (int c = 0; c < 3; ++c) {
      host.push_back(randn(blocks * block_elems, 16 + c));
      dev.push_back(std::make_unique<DevBuf<float>>(host.back()));
      ptrs.push_back(reinterpret_cast<uint64_t>(dev.back()->get()));
    }
    const std::vector<int64_t> pairs = {0, 5, 3, 1, 7, 2};
    DevBuf<uint64_t> dptrs(ptrs);
    DevBuf<int64_t> dpairs(pairs);
    copy_blocks_cuda(dptrs.get(), 3, dpairs.get(), 3, block_elems * 4, nullptr);
    for (int c = 0; c < 3; ++c) {
      std::vector<float> ref = host[c];
      for (size_t p = 0; p < pairs.size(); p += 2) {
        std::copy_n(host[c].begin() + pairs[p] * block_elems, block_elems, ref.begin() + pairs[p + 1] * block_elems);
      }
      EXPECT_EQ(norm_err(dev[c]->download(), ref), 0.0) << "cache " << c << " block elems " << block_elems;
    }
  }
}

struct AttnCase {
  int head_dim, num_heads, num_kv_heads, block_size, window;
  std::vector<std::pair<int, int>> seqs;  // (new tokens, context length)
  const char* name;
};

class PagedAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PagedAttention, MatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const AttnCase& c = GetParam();
  const testing_support::PagedBatch b =
      testing_support::shuffled_paged_batch(c.head_dim, c.num_heads, c.num_kv_heads, c.block_size, c.seqs);
  std::vector<float> kc = randn(b.num_slots() * b.kv_row(), 21);
  std::vector<float> vc = randn(b.num_slots() * b.kv_row(), 22);
  const int64_t ldq = b.q_row() + 8;
  std::vector<float> q = randn(b.num_tokens * ldq, 23);

  PagedAttentionParams p;
  p.q = q.data();
  p.ldq = ldq;
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  const std::vector<float> ref = paged_attention_reference(p, b, c.window);

  for (bool hints : {true, false}) {  // with and without the host-side length bounds
    EXPECT_LT(norm_err(paged_attention_on_gpu(p, b, hints), ref), kF32Tol)
        << c.name << (hints ? " with" : " without") << " hints";
  }
  // Gemma 2's tanh soft-capping of the scores, in the decode (split-K) and the prefill kernels.
  p.softcap = 0.7f;
  std::vector<float> capped(ref.size());
  p.out = capped.data();
  paged_attention_cpu(p, nullptr);
  EXPECT_GT(norm_err(capped, ref), 1e-4) << c.name << ": the cap changes the result";
  // tanhf differs from the CPU's by a few ulps, which the cap's scale amplifies (seen: 1.1e-5 at 64 splits).
  EXPECT_LT(norm_err(paged_attention_on_gpu(p, b), capped), 3 * kF32Tol) << c.name << " soft-capped";
}

INSTANTIATE_TEST_SUITE_P(
    Batches, PagedAttention,
    ::testing::Values(
        AttnCase{8, 4, 2, 16, 0, {{1, 1}, {1, 17}, {1, 300}}, "decode_tiny_heads"},
        AttnCase{128, 32, 8, 16, 0, {{1, 3000}}, "decode_long_split_k"},
        AttnCase{128, 8, 8, 16, 0, {{1, 1500}, {1, 40}, {1, 513}}, "decode_mha_splits"},
        // 8 tokens x 32 heads cap the split count at 4 (< ceil(3001 / 512)); and one head at kMaxSplits (64 <
        // ceil(33000 / 512)): the splits must still cover every key.
        AttnCase{64, 32, 8, 16, 0, {{1, 3000}, {1, 2500}, {1, 100}, {1, 3001}, {1, 7}, {1, 2100}, {1, 2049}, {1, 1}},
                 "decode_capped_splits"},
        AttnCase{128, 1, 1, 16, 0, {{1, 33000}}, "decode_max_splits"},
        AttnCase{64, 8, 2, 16, 0, {{37, 37}, {1, 70}, {20, 90}, {5, 5}}, "mixed_prefill_chunk_decode"},
        AttnCase{64, 8, 1, 4, 7, {{50, 60}, {1, 33}}, "sliding_window_mqa"},
        AttnCase{256, 4, 2, 16, 0, {{33, 40}}, "prefill_head_dim_256"},
        AttnCase{8, 4, 2, 1, 5, {{1, 20}, {1, 3}}, "decode_window_block_size_1"},
        AttnCase{80, 10, 5, 32, 0, {{300, 700}}, "prefill_long_chunk"},
        AttnCase{5, 2, 1, 16, 0, {{1, 600}, {1, 9}}, "decode_odd_head_dim"},
        AttnCase{3, 2, 2, 16, 0, {{19, 25}}, "prefill_odd_head_dim"}),
    [](const ::testing::TestParamInfo<AttnCase>& i) { return std::string(i.param.name); });


// One attention case for io type `io` over a cache of type `cache`: fp32 K/V random, written into the
// cache by the CPU writer (fp8 scales 1.5 and 0.5), q rounded to `io`; the GPU's output (poisoned
// first) against paged_attention_cpu over the same bytes. Returns the normalised error.
double attention_error(const AttnCase& c, DType io, DType cache, float softcap, uint32_t seed, bool hints = true) {
  const testing_support::PagedBatch b =
      testing_support::shuffled_paged_batch(c.head_dim, c.num_heads, c.num_kv_heads, c.block_size, c.seqs);
  const int64_t kv_row = b.kv_row(), slots_n = b.num_slots();
  const std::vector<float> k = randn(slots_n * kv_row, seed, 1.5f), v = randn(slots_n * kv_row, seed + 1);
  std::vector<int64_t> all(slots_n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<uint8_t> kc(k.size() * dtype_size(cache)), vc(v.size() * dtype_size(cache));
  write_kv_cache_cpu(k.data(), kv_row, v.data(), kv_row, slots_n, all.data(), kv_row, kc.data(), vc.data(), slots_n,
                     cache, 1.5f, 0.5f);
  const int64_t ldq = b.q_row() + 8;
  const std::vector<float> q = rounded_to(randn(b.num_tokens * ldq, seed + 2), io);
  PagedAttentionParams p;
  p.q = q.data();
  p.ldq = ldq;
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  p.cache_dtype = cache;
  p.k_scale = 1.5f;
  p.v_scale = 0.5f;
  p.softcap = softcap;
  const std::vector<float> ref = paged_attention_reference(p, b, c.window);
  return norm_err(paged_attention_on_gpu(p, b, hints, io), ref);
}

double tolerance_for(DType io) { return io == DType::F32 ? kF32Tol : kHalfTol; }

// Decode over every io type x cache type, through the GQA kernel (head_dim 128, groups of 4 and 8, with
// and without splits, a sliding window) and the scalar one (head_dim 8 and 40).
TEST(CudaAttentionTypes, DecodeMatchesCpuForEveryIoAndCacheType) {
  CYPRIS_REQUIRE_GPU();
  const AttnCase cases[] = {
      {128, 32, 8, 16, 0, {{1, 150}}, "gqa4_batch1"},
      {128, 32, 8, 16, 0, {{1, 3000}, {1, 17}, {1, 1}}, "gqa4_split_k"},
      {128, 16, 2, 32, 0, {{1, 700}, {1, 65}}, "gqa8_block32"},
      {64, 8, 1, 16, 100, {{1, 500}, {1, 90}}, "mqa_window"},
      {128, 24, 2, 16, 0, {{1, 200}}, "gqa12_two_head_chunks"},
      {8, 4, 2, 16, 0, {{1, 1}, {1, 17}, {1, 300}}, "scalar_tiny_heads"},
      {40, 4, 4, 16, 0, {{1, 300}, {1, 3}}, "scalar_head_dim_40"},
  };
  uint32_t seed = 100;
  for (const AttnCase& c : cases) {
    for (const DType io : kIoTypes) {
      for (const DType cache : kCacheTypes) {
        for (const bool hints : {true, false}) {
          seed += 3;
          EXPECT_LT(attention_error(c, io, cache, 0.0f, seed, hints), tolerance_for(io))
              << c.name << " io " << dtype_name(io) << " cache " << dtype_name(cache) << (hints ? "" : " no hints");
        }
      }
      seed += 3;
      EXPECT_LT(attention_error(c, io, DType::BF16, 0.7f, seed), tolerance_for(io))
          << c.name << " io " << dtype_name(io) << " soft-capped";
    }
  }
}

// Prefill and mixed batches with 16-bit q and cache (the tensor-core kernel's inputs when it is
// enabled; the scalar kernel's otherwise), and fp32 / fp8 combinations on the scalar kernel.
class PrefillTypes : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PrefillTypes, MatchCpu) {
  CYPRIS_REQUIRE_GPU();
  const AttnCase& c = GetParam();
  uint32_t seed = 500;
  for (const DType dt : {DType::BF16, DType::F16}) {
    EXPECT_LT(attention_error(c, dt, dt, 0.0f, seed += 3), kHalfTol) << c.name << " " << dtype_name(dt);
    EXPECT_LT(attention_error(c, dt, dt, 0.0f, seed += 3, false), kHalfTol) << c.name << " " << dtype_name(dt)
                                                                             << " no hints";
    EXPECT_LT(attention_error(c, dt, dt, 0.7f, seed += 3), kHalfTol) << c.name << " " << dtype_name(dt) << " capped";
  }
  EXPECT_LT(attention_error(c, DType::BF16, DType::F8E4M3, 0.0f, seed += 3), kHalfTol) << c.name << " bf16 / e4m3";
  EXPECT_LT(attention_error(c, DType::F16, DType::BF16, 0.0f, seed += 3), kHalfTol) << c.name << " f16 / bf16 cache";
  EXPECT_LT(attention_error(c, DType::F32, DType::F16, 0.0f, seed += 3), kF32Tol) << c.name << " f32 / f16 cache";
}

INSTANTIATE_TEST_SUITE_P(
    Batches, PrefillTypes,
    ::testing::Values(
        AttnCase{64, 8, 8, 16, 0, {{77, 77}}, "d64_mha"},
        AttnCase{80, 8, 2, 16, 0, {{50, 50}, {1, 30}, {33, 90}}, "d80_gqa4_mixed"},
        AttnCase{96, 16, 2, 32, 0, {{130, 130}, {7, 40}}, "d96_gqa8_block32"},
        AttnCase{128, 32, 8, 16, 0, {{128, 128}, {1, 200}, {64, 300}, {3, 3}}, "d128_gqa4_mixed_chunked"},
        AttnCase{128, 8, 2, 32, 20, {{100, 140}, {1, 60}}, "d128_window"},
        AttnCase{256, 8, 1, 16, 0, {{40, 70}, {17, 17}}, "d256_mqa"},
        AttnCase{256, 4, 4, 32, 9, {{65, 65}}, "d256_window_block32"},
        AttnCase{64, 4, 1, 16, 0, {{1, 1}, {16, 16}, {15, 31}, {17, 49}}, "d64_tile_edges"},
        AttnCase{48, 4, 2, 16, 0, {{30, 40}}, "d48_scalar_fallback"}),
    [](const ::testing::TestParamInfo<AttnCase>& i) { return std::string(i.param.name); });

TEST(CudaKernels, ArgmaxMatchesCpuIncludingTiesAndNan) {
  CYPRIS_REQUIRE_GPU();
  const int64_t rows = 5, vocab = 128256, ld = vocab + 7;
  std::vector<float> x = randn(rows * ld, 40);
  x[1 * ld + 77] = 50.0f;  // a tie: the first index wins
  x[1 * ld + 99000] = 50.0f;
  x[2 * ld + 5] = NAN;  // NaNs are skipped
  x[2 * ld + 6] = 60.0f;
  x[3 * ld + vocab - 1] = 70.0f;  // the last element
  std::vector<int32_t> ref(rows);
  argmax_rows_cpu(x.data(), rows, vocab, ld, ref.data());
  EXPECT_EQ(ref[1], 77);
  DevBuf<float> dx(x);
  DevBuf<int32_t> out(rows);
  out.poison();
  argmax_rows_cuda(dx.get(), rows, vocab, ld, out.get(), nullptr);
  EXPECT_EQ(out.download(), ref);
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
