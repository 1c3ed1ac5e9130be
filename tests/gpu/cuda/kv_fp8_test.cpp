// The fp8 KV cache on the GPU against the CPU reference: reshape_and_cache stores exactly the CPU's
// bytes (both use kernels/common/fp8.h), paged attention (decode, split-K and prefill kernels) over
// an fp8 cache matches paged_attention_cpu over the same bytes within fp32 tolerance, block copies
// move fp8 blocks byte for byte, and the CUDA engine with an fp8 cache gives the CPU fp8 engine's
// logprobs (prompt and greedy steps). Skips itself without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/cache_ops.h"
#include "kernels/cuda/paged_attention.h"
#include "tests/support/engine_jobs.h"
#endif

namespace cypris {
namespace {

using namespace gpu_test;

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaFp8KvCache)
#ifdef CYPRIS_HAVE_CUDA

constexpr double kF32Tol = 1e-5;

class CudaFp8 : public ::testing::TestWithParam<DType> {};

TEST_P(CudaFp8, ReshapeAndCacheStoresTheCpuBytes) {
  CYPRIS_REQUIRE_GPU();
  const DType dt = GetParam();
  const int64_t num_slots = 24, width = 40, n = 9, ld = 3 * width;
  // Wide range: subnormals, normals and values that saturate after the scale.
  std::vector<float> kv = randn(n * ld, 31, 50.0f);
  kv[0] = 1e-6f;
  kv[1] = -1e6f;
  kv[2] = 0.0f;
  const std::vector<int64_t> slots = {5, 0, -1, 23, 7, 8, -1, 12, 2};
  std::vector<uint8_t> kref(num_slots * width, 0x5A), vref = kref;
  write_kv_cache_cpu(kv.data(), ld, kv.data() + width, ld, n, slots.data(), width, kref.data(), vref.data(), num_slots,
                     dt, 0.5f, 3.0f);
  DevBuf<float> dkv(kv);
  DevBuf<uint8_t> dk(std::vector<uint8_t>(num_slots * width, 0x5A)), dv(std::vector<uint8_t>(num_slots * width, 0x5A));
  DevBuf<int64_t> dslots(slots);
  reshape_and_cache_cuda(dkv.get(), ld, dkv.get() + width, ld, DType::F32, n, dslots.get(), width, dk.get(), dv.get(),
                         num_slots, nullptr, dt, 0.5f, 3.0f);
  EXPECT_EQ(dk.download(), kref);
  EXPECT_EQ(dv.download(), vref);
}

struct Fp8AttnCase {
  int head_dim, num_heads, num_kv_heads, block_size, window;
  std::vector<std::pair<int, int> > seqs;  // (new tokens, context length)
};

void check_attention(DType dt, const Fp8AttnCase& c) {
  const testing_support::PagedBatch b =
      testing_support::shuffled_paged_batch(c.head_dim, c.num_heads, c.num_kv_heads, c.block_size, c.seqs);
  const int64_t kv_row = b.kv_row();
  const int64_t slots_n = b.num_slots();
  // The fp8 cache is filled by the CPU writer from fp32 K/V, scales 2 and 0.25.
  const std::vector<float> k = randn(slots_n * kv_row, 21, 4.0f), v = randn(slots_n * kv_row, 22, 0.5f);
  std::vector<int64_t> all(slots_n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<uint8_t> kc(k.size()), vc(v.size());
  write_kv_cache_cpu(k.data(), kv_row, v.data(), kv_row, slots_n, all.data(), kv_row, kc.data(), vc.data(), slots_n, dt,
                     2.0f, 0.25f);
  const std::vector<float> q = randn(b.num_tokens * b.q_row(), 23);

  PagedAttentionParams p;
  p.q = q.data();
  p.ldq = b.q_row();
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  p.cache_dtype = dt;
  p.k_scale = 2.0f;
  p.v_scale = 0.25f;
  const std::vector<float> ref = paged_attention_reference(p, b, c.window);

  EXPECT_LT(norm_err(paged_attention_on_gpu(p, b), ref), kF32Tol);
}

TEST_P(CudaFp8, PagedAttentionMatchesCpu) {
  CYPRIS_REQUIRE_GPU();
  const Fp8AttnCase cases[] = {
      {8, 4, 2, 16, 0, {{1, 1}, {1, 17}, {1, 300}}},             // decode
      {128, 32, 8, 16, 0, {{1, 3000}}},                          // decode, split-K
      {64, 8, 2, 16, 0, {{37, 37}, {1, 70}, {20, 90}, {5, 5}}},  // prefill / mixed
      {64, 8, 1, 4, 7, {{50, 60}, {1, 33}}},                     // sliding window, MQA
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(testing::Message() << "case " << i);
    check_attention(GetParam(), cases[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaFp8, ::testing::Values(DType::F8E4M3, DType::F8E5M2),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return i.param == DType::F8E4M3 ? std::string("e4m3") : std::string("e5m2");
                         });

TEST(CudaFp8KvCache, CopyBlocksMovesFp8BlocksByteForByte) {
  CYPRIS_REQUIRE_GPU();
  for (int64_t block_bytes : {int64_t{64}, int64_t{6}}) {  // 16-byte and 1-byte copy paths
    const int64_t blocks = 8;
    std::vector<uint8_t> host(blocks * block_bytes);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 37 + 11);
    DevBuf<uint8_t> cache(host);
    const std::vector<uint64_t> ptrs = {reinterpret_cast<uint64_t>(cache.get())};
    const std::vector<int64_t> pairs = {0, 5, 3, 1};
    DevBuf<uint64_t> dptrs(ptrs);
    DevBuf<int64_t> dpairs(pairs);
    copy_blocks_cuda(dptrs.get(), 1, dpairs.get(), 2, block_bytes, nullptr);
    std::vector<uint8_t> ref = host;
    for (size_t p = 0; p < pairs.size(); p += 2) {
      std::copy_n(host.begin() + pairs[p] * block_bytes, block_bytes, ref.begin() + pairs[p + 1] * block_bytes);
    }
    EXPECT_EQ(cache.download(), ref) << block_bytes << " bytes per block";
  }
}

// The whole CUDA path (fp8 cache allocation, write, decode and prefill reads) against the CPU engine
// with the same fp8 cache. Not whole greedy runs: both devices compute K/V in fp32 with different
// summation orders, so a value near an fp8 rounding boundary (e5m2 has 2 mantissa bits) is stored as a
// different code and greedy decoding may take another branch at a near tie. So the test compares
// what the cache decides: the prompt's logprobs (teacher-forced: cache writes and prefill attention on
// identical tokens), and the greedy steps up to the first difference, which must be a near tie on the
// CPU (the GPU's token within kTie of the CPU's top logprob). A broken cache (wrong scale, wrong
// codes, a missed write) moves logprobs far more than kLogprobTol.
TEST(CudaFp8KvCache, EngineLogprobsMatchTheCpuFp8Engine) {
  CYPRIS_REQUIRE_GPU();
  constexpr float kLogprobTol = 0.3f;  // per position
  constexpr double kMeanTol = 0.05;    // mean over the prompt
  constexpr float kTie = 0.3f;
  struct Run {
    std::vector<PositionLogprobs> prompt, gen;
    std::vector<int32_t> ids;
  };
  for (const char* kv : {"fp8_e4m3", "fp8_e5m2"}) {
    SCOPED_TRACE(kv);
    std::vector<Run> runs;
    for (const char* device : {"cpu", "cuda"}) {
      EngineConfig cfg = testing_support::stories_config(1, device);
      cfg.quant.kv_cache_dtype = kv;
      if (std::string(device) == "cuda") cfg.cache.num_gpu_blocks_override = 2000;
      Engine engine(cfg);
      auto p = std::make_shared<SamplingParams>();
      p->temperature = 0.0f;
      p->max_tokens = 30;
      p->ignore_eos = true;
      p->logprobs = 5;
      p->prompt_logprobs = 1;
      auto stream = std::make_shared<RequestStream>("r");
      std::vector<int32_t> prompt = {1};
      for (int i = 0; i < 60; ++i) prompt.push_back(3 + (i * 37) % 500);
      engine.add_request(GenerateRequest{"r", prompt, "", p, 0}, stream);
      while (engine.has_unfinished_requests()) engine.step();
      Run run;
      while (auto o = stream->next(std::chrono::milliseconds(0))) {
        ASSERT_FALSE(o->error) << *o->error;
        run.prompt.insert(run.prompt.end(), o->prompt_logprobs.begin(), o->prompt_logprobs.end());
        for (const auto& d : o->outputs) {
          run.ids.insert(run.ids.end(), d.token_ids.begin(), d.token_ids.end());
          run.gen.insert(run.gen.end(), d.logprobs.begin(), d.logprobs.end());
        }
      }
      runs.push_back(std::move(run));
    }
    const Run& cpu = runs[0];
    const Run& gpu = runs[1];
    ASSERT_EQ(cpu.ids.size(), 30u);
    ASSERT_EQ(gpu.ids.size(), 30u);
    ASSERT_EQ(cpu.gen.size(), 30u);
    ASSERT_EQ(gpu.gen.size(), 30u);
    ASSERT_EQ(cpu.prompt.size(), 60u);
    ASSERT_EQ(gpu.prompt.size(), 60u);
    double sum = 0;
    for (size_t i = 0; i < cpu.prompt.size(); ++i) {
      ASSERT_EQ(gpu.prompt[i].token_id, cpu.prompt[i].token_id);
      const float diff = std::abs(gpu.prompt[i].logprob - cpu.prompt[i].logprob);
      EXPECT_LT(diff, kLogprobTol) << "prompt position " << i + 1;
      sum += diff;
    }
    EXPECT_LT(sum / static_cast<double>(cpu.prompt.size()), kMeanTol) << "mean prompt logprob difference";
    for (size_t i = 0; i < cpu.ids.size(); ++i) {
      if (gpu.ids[i] == cpu.ids[i]) {
        EXPECT_LT(std::abs(gpu.gen[i].logprob - cpu.gen[i].logprob), kLogprobTol) << "step " << i;
        continue;
      }
      // The first difference: the GPU's pick must be a near tie among the CPU's candidates.
      float cpu_lp_of_gpu_pick = -INFINITY;
      for (const auto& c : cpu.gen[i].top) {
        if (c.token_id == gpu.ids[i]) cpu_lp_of_gpu_pick = c.logprob;
      }
      EXPECT_LT(cpu.gen[i].logprob - cpu_lp_of_gpu_pick, kTie)
          << "step " << i << ": the GPU chose " << gpu.ids[i] << ", the CPU " << cpu.ids[i];
      break;  // past a different token the contexts differ
    }
  }
}

#endif

}  // namespace
}  // namespace cypris
