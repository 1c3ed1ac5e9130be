// CudaBackend::grouped_linear (a MoE layer's projection: each expert's weight over its own run of
// rows) against the Backend default on the same GPU (one linear() per run, whose kernels are
// checked against the CPU in kernels_test.cpp and quant_test.cpp):
//  - decode-sized runs take one grouped GEMV launch: equal to the per-run GEMV bit for bit, for
//    bf16 weights with bf16 activations and with fp32 activations, and for quantized experts;
//  - larger runs of 16-bit experts take one cuBLAS grouped GEMM: within bf16 rounding of the
//    per-run cublasGemmEx (both accumulate in fp32; the algorithms may differ);
//  - rows in no run keep their poison; more groups than one launch takes (kGemvGroupsPerLaunch).
// Skips itself without a GPU. Written without a GPU: never ran yet.
#include <gtest/gtest.h>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/cuda/gemm.h"
#include "tests/support/quant_weights.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaGroupedLinear)
#ifdef CYPRIS_HAVE_CUDA

DeviceTensor weight(CudaBackend& be, DType t, int64_t n, int64_t k, uint32_t seed) {
  HostTensor h;
  h.dtype = t;
  h.shape = {n, k};
  std::vector<uint8_t> bytes;
  if (dtype_is_quantized(t)) {
    bytes = test::random_weights(t, n, k, seed);
  } else {
    bytes = store(randn(n * k, seed, 0.1f), t).bytes;
  }
  h.buffer = Buffer(bytes.size());
  std::memcpy(h.buffer.data(), bytes.data(), bytes.size());
  return be.upload_weight(std::move(h));
}

// out of one call, as fp32; poisoned (NaN) before it.
std::vector<float> run(CudaBackend& be, bool grouped, const Tensor& x, const std::vector<LinearGroup>& groups,
                       int64_t n) {
  const DType act = be.activation_dtype();
  const Stored poison = store(std::vector<float>(x.shape[0] * n, NAN), act);
  DeviceTensor out = be.upload(poison.bytes.data(), act, {x.shape[0], n});
  if (grouped) {
    be.grouped_linear(x, groups, out.view);
  } else {
    be.Backend::grouped_linear(x, groups, out.view);
  }
  std::vector<uint8_t> raw(out.view.nbytes());
  be.download(out.view, raw.data());
  return to_f32(raw, act);
}

struct Case {
  DType act, weight;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first, rows)
  double tol;                                     // 0: bit for bit
};

void check(const Case& c) {
  CudaBackendOptions o;
  o.activation_dtype = c.act;
  CudaBackend be(o);
  const int64_t k = 512, n = 136;
  int64_t m = 0;
  for (const auto& [first, rows] : c.runs) m = std::max(m, first + rows + 1);  // a last row in no run
  const Stored xs = store(randn(m * k, 5), c.act);
  DeviceTensor x = be.upload(xs.bytes.data(), c.act, {m, k});
  std::vector<DeviceTensor> w;
  std::vector<LinearGroup> groups;
  for (size_t e = 0; e < c.runs.size(); ++e) w.push_back(weight(be, c.weight, n, k, 100 + static_cast<uint32_t>(e)));
  for (size_t e = 0; e < c.runs.size(); ++e) groups.push_back({&w[e].view, c.runs[e].first, c.runs[e].second});
  const auto got = run(be, true, x.view, groups, n);
  const auto want = run(be, false, x.view, groups, n);
  const std::string what = std::string(dtype_name(c.act)) + " x " + std::string(dtype_name(c.weight));
  if (c.tol == 0) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << what << ": row " << i / n << " is in no run but was written";
      } else {
        ASSERT_EQ(got[i], want[i]) << what << ": row " << i / n << " col " << i % n;
      }
    }
  } else {
    EXPECT_LT(norm_err(got, want), c.tol) << what;  // NaN where the other has none counts as a failure
  }
}

TEST(CudaGroupedLinear, DecodeRunsInOneGemvEqualThePerRunGemv) {
  CYPRIS_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, 1}, {1, 0}, {2, 3}, {6, 8}, {15, 2}};  // row 5: none
  check({DType::BF16, DType::BF16, runs, 0});
  check({DType::F16, DType::F16, runs, 0});
  check({DType::F32, DType::BF16, runs, 0});
  // GGUF experts, and GPTQ/AWQ/compressed-tensors experts repacked into W4/W8 blocks.
  for (DType q : {DType::Q4_K, DType::Q8_0, DType::Q6_K, DType::Q4_0, DType::W4G32, DType::W4G64, DType::W4G128, DType::W8G32,
                  DType::W8G128}) {
    check({DType::BF16, q, runs, 0});
    check({DType::F32, q, runs, 0});
  }
  // 130 one-row runs: three launches of at most kGemvGroupsPerLaunch groups.
  std::vector<std::pair<int64_t, int64_t>> many;
  for (int64_t e = 0; e < 130; ++e) many.push_back({e, 1});
  check({DType::BF16, DType::BF16, many, 0});
  check({DType::BF16, DType::Q4_K, many, 0});
}

TEST(CudaGroupedLinear, PrefillRunsInOneCublasGroupedGemmStayWithinBf16Rounding) {
  CYPRIS_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, 40}, {40, 3}, {43, 0}, {44, 17}, {62, 100}};  // 61: none
  check({DType::BF16, DType::BF16, runs, 1e-2});
  check({DType::F16, DType::F16, runs, 1e-2});
  check({DType::BF16, DType::Q4_K, runs, 0});  // quantized prefill: the per-run path itself
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
