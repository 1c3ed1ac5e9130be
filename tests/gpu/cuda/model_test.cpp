// Whole models on the GPU against the CPU backend: greedy outputs must be equal on stories260k
// and on every tiny random fixture (tests/fixtures/models/), with the GPU's GEMMs and activations
// in fp32 so the numerics are the CPU's; the default path (bf16 activations and KV cache, tensor
// cores) stays close in logits and top-1. Also the backend's memory
// ops: KV block copy and swap through pinned host memory. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/runtime/model_runner.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaModel)
#ifdef CYPRIS_HAVE_CUDA

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<float> first_logits;  // after the prompt
};

// Prefill of the whole prompt, then one-token decode steps.
GreedyRun greedy(ModelRunner& runner, std::vector<int32_t> ids, int steps) {
  GreedyRun r;
  Logits l = runner.execute(make_single_sequence_batch(ids, 0, runner.block_size()));
  r.first_logits = l.data;
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmax(l.row(0), l.vocab);
    r.tokens.push_back(next);
    ids.push_back(next);
    if (i + 1 < steps) {
      const int32_t tok[] = {next};
      l = runner.execute(make_single_sequence_batch(tok, static_cast<int32_t>(ids.size()) - 1, runner.block_size()));
    }
  }
  return r;
}

ModelRunnerOptions options(const std::string& dir, const std::string& device, const std::string& dtype) {
  ModelRunnerOptions o;
  o.model_dir = dir;
  o.load.dtype = dtype;
  o.threads = 2;
  o.device = device;
  o.cuda_fp32_gemm = true;
  return o;
}

TEST(CudaModel, Stories260kGreedyEqualsCpu) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  ModelRunner cpu(options(dir, "cpu", "float32"));
  ModelRunner gpu(options(dir, "cuda", "float32"));
  EXPECT_EQ(gpu.backend().name(), "cuda");
  // A 20-token prompt takes the prefill kernel and cuBLAS; the decode steps the GEMV and split-K paths.
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 19; ++i) prompt.push_back(3 + (i * 37) % 500);
  const GreedyRun c = greedy(cpu, prompt, 200);
  const GreedyRun g = greedy(gpu, prompt, 200);
  EXPECT_LT(norm_err(g.first_logits, c.first_logits), 1e-4);
  EXPECT_EQ(g.tokens, c.tokens);
}

class CudaFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaFixture, GreedyEqualsCpu) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_FIXTURES_DIR) + "/models/" + GetParam();
  ModelRunner cpu(options(dir, "cpu", "auto"));
  ModelRunner gpu(options(dir, "cuda", "auto"));
  const std::vector<int32_t> prompt = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37};
  const int steps = std::min<int>(30, static_cast<int>(cpu.config().max_model_len) - 11);
  ASSERT_GT(steps, 0);
  const GreedyRun c = greedy(cpu, prompt, steps);
  const GreedyRun g = greedy(gpu, prompt, steps);
  EXPECT_LT(norm_err(g.first_logits, c.first_logits), 1e-4);
  EXPECT_EQ(g.tokens, c.tokens);
}

// 16-bit activations and KV cache, the GPU's default for a 16-bit model: with the CPU's tokens fed to
// both (teacher forcing, so one near-tie cannot send the runs apart), the logits of the prefill and
// of each decode step stay within bf16 tolerance of the CPU's fp32 computation on the same bf16
// weights, and the top token agrees wherever the CPU's top two are not a near-tie.
TEST_P(CudaFixture, Bf16ActivationsAndCacheStayCloseToCpu) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_FIXTURES_DIR) + "/models/" + GetParam();
  ModelRunnerOptions go = options(dir, "cuda", "bfloat16");
  go.cuda_fp32_gemm = false;
  ModelRunner cpu(options(dir, "cpu", "bfloat16"));
  ModelRunner gpu(go);
  EXPECT_EQ(gpu.activation_dtype(), DType::BF16);
  EXPECT_EQ(gpu.kv_cache_dtype(), DType::BF16);
  // Routing flips between near-tied experts (bf16 router inputs) move a mixture-of-experts model's
  // logits more than rounding moves a dense model's.
  const double tol = cpu.config().num_experts > 0 ? 0.15 : 3e-2;
  const int max_len = static_cast<int>(cpu.config().max_model_len);
  const int prompt_len = std::min(12, max_len - 1);  // > 8 rows: cuBLAS and the prefill kernel (where it fits)
  std::vector<int32_t> ids;
  for (int i = 0; i < prompt_len; ++i) ids.push_back(1 + (i * 11) % 60);
  const int steps = std::clamp(max_len - prompt_len - 1, 0, 8);
  Logits lc = cpu.execute(make_single_sequence_batch(ids, 0, cpu.block_size()));
  Logits lg = gpu.execute(make_single_sequence_batch(ids, 0, gpu.block_size()));
  for (int step = 0;; ++step) {
    const std::vector<float> c(lc.row(0), lc.row(0) + lc.vocab), g(lg.row(0), lg.row(0) + lg.vocab);
    EXPECT_LT(norm_err(g, c), tol) << "step " << step;
    std::vector<float> sorted = c;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const double range = *std::max_element(c.begin(), c.end()) - *std::min_element(c.begin(), c.end());
    if (sorted[0] - sorted[1] > 0.05 * range) EXPECT_EQ(argmax(g.data(), lg.vocab), argmax(c.data(), lc.vocab)) << "step " << step;
    if (step == steps) break;
    const int32_t next = argmax(c.data(), lc.vocab);
    ids.push_back(next);
    const int32_t tok[] = {next};
    const int32_t pos = static_cast<int32_t>(ids.size()) - 1;
    lc = cpu.execute(make_single_sequence_batch(tok, pos, cpu.block_size()));
    lg = gpu.execute(make_single_sequence_batch(tok, pos, gpu.block_size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(CudaModel, TensorCoreGemmStaysCloseOnBf16) {
  CYPRIS_REQUIRE_GPU();
  const std::string dir = std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_gqa_tied_bf16";
  ModelRunnerOptions fast = options(dir, "cuda", "auto");
  fast.cuda_fp32_gemm = false;
  ModelRunner cpu(options(dir, "cpu", "auto"));
  ModelRunner gpu(fast);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back(1 + (i * 7) % 60);  // > 8 rows: the cuBLAS path
  EXPECT_LT(norm_err(greedy(gpu, prompt, 1).first_logits, greedy(cpu, prompt, 1).first_logits), 2e-2);
}

TEST(CudaBackendMemory, CopyAndSwapBlocksRoundTrip) {
  CYPRIS_REQUIRE_GPU();
  CudaBackend be;
  const std::vector<int64_t> shape = {6, 4, 2, 8};  // [blocks, block_size, kv_heads, head_dim]
  const int64_t block = 4 * 2 * 8;
  std::vector<float> host = randn(6 * block, 30);
  DeviceTensor cache = be.upload(host.data(), DType::F32, shape);
  be.copy_blocks({cache.view}, {0, 3, 5, 1});
  std::vector<float> ref = host;
  std::copy_n(host.begin() + 0 * block, block, ref.begin() + 3 * block);
  std::copy_n(host.begin() + 5 * block, block, ref.begin() + 1 * block);
  std::vector<float> got(ref.size());
  be.download(cache.view, got.data());
  EXPECT_EQ(norm_err(got, ref), 0.0);

  DeviceTensor pool = be.empty_host(DType::F32, {3, 4, 2, 8});
  be.swap_blocks(cache.view, pool.view, {2, 0, 4, 2});  // out: device 2 -> host 0, 4 -> 2
  be.swap_blocks(pool.view, cache.view, {0, 5, 2, 0});  // in: host 0 -> device 5, 2 -> 0
  be.download(cache.view, got.data());
  std::copy_n(ref.begin() + 2 * block, block, ref.begin() + 5 * block);
  std::copy_n(ref.begin() + 4 * block, block, ref.begin() + 0 * block);
  EXPECT_EQ(norm_err(got, ref), 0.0);
}

TEST(CudaBackendMemory, DeviceSelection) {
  CYPRIS_REQUIRE_GPU();
  EXPECT_EQ(resolve_device("auto"), "cuda");
  EXPECT_EQ(resolve_device("cuda"), "cuda");
  EXPECT_EQ(resolve_device("cpu"), "cpu");
  EXPECT_THROW(resolve_device("metal"), Error);
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
