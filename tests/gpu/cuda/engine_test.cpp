// The engine core on the GPU: continuous batching, chunked prefill and preemption (recompute and
// swap through pinned host memory) must give every request the greedy output it gets alone on the
// GPU, and those must equal the CPU engine's. stories260k, fp32. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#endif

namespace cypris {
namespace {

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaEngine)
#ifdef CYPRIS_HAVE_CUDA

using namespace testing_support;

EngineConfig config(const std::string& device) {
  EngineConfig cfg = stories_config(1, device);
  cfg.cache.num_gpu_blocks_override = 2000;  // the GPU would otherwise take most of its memory
  return cfg;
}

Outputs run_solo(const std::string& device, const std::vector<Job>& jobs) {
  return testing_support::run_solo(config(device), jobs);
}

class CudaEquivalence : public EquivalenceSuite<CudaEquivalence> {
 public:
  static constexpr int kJobs = 48;
  static bool available() { return cuda_device_count() > 0; }
  static EngineConfig solo_config() { return config("cuda"); }
};

TEST_F(CudaEquivalence, SoloOnGpuEqualsSoloOnCpu) {
  CYPRIS_REQUIRE_GPU();
  const auto cpu = run_solo("cpu", *jobs_);
  for (const auto& j : *jobs_) EXPECT_EQ(solo_->at(j.id), cpu.at(j.id)) << j.id;
}

TEST_F(CudaEquivalence, SpeculativeDecodingKeepsOutputs) {
  // Prompt lookup on the GPU: verify steps of up to 8 sequences replay the graph of their longest
  // sequence's query tokens (shorter ones padded in front, whatever each one's draft length), the
  // others run eagerly; the verified rows are sampled on the CPU.
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.spec.speculative_model = "[ngram]";
  cfg.spec.num_speculative_tokens = 4;
  cfg.spec.ngram_prompt_lookup_max = 3;
  Engine engine(cfg);
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().spec_accepted_tokens_total, 0);
}

TEST_F(CudaEquivalence, DraftModelSpeculationKeepsOutputs) {
  // stories260k drafting for itself on the GPU: the draft's own runner and KV cache (its one-token
  // decodes replay its own graphs), k
  // forwards a step batched over the sequences; greedy outputs are the target's and nearly every
  // draft is kept.
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.spec.speculative_model = cfg.model.model;
  cfg.spec.num_speculative_tokens = 3;
  Engine engine(cfg);
  expect_batch_like_solo(engine);
  const EngineStats s = engine.stats();
  EXPECT_GT(s.spec_draft_tokens_total, 0);
  EXPECT_GT(double(s.spec_accepted_tokens_total), 0.9 * double(s.spec_draft_tokens_total));
}

TEST_F(CudaEquivalence, SpeculativeDecodingAloneReplaysVerifyGraphs) {
  // One sequence at a time: every verify step has one length (its drafts + 1), so it replays a
  // graph; the outputs are those of the GPU without speculation.
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.spec.speculative_model = "[ngram]";
  cfg.spec.num_speculative_tokens = 3;
  cfg.spec.ngram_prompt_lookup_max = 2;
  const std::vector<Job> some(jobs_->begin(), jobs_->begin() + 12);  // an engine (and its graphs) per job
  const Outputs got = testing_support::run_solo(cfg, some);
  for (const auto& j : some) EXPECT_EQ(got.at(j.id), solo_->at(j.id)) << j.id;
}

TEST_F(CudaEquivalence, ContinuousBatching) {
  CYPRIS_REQUIRE_GPU();
  Engine engine(config("cuda"));
  EXPECT_EQ(engine.model_info().device, "cuda");
  expect_batch_like_solo(engine);
}

TEST_F(CudaEquivalence, ChunkedPrefill) {
  CYPRIS_REQUIRE_GPU();
  Engine engine(with_chunked_prefill(config("cuda")));
  expect_batch_like_solo(engine);
}

TEST_F(CudaEquivalence, PreemptionByRecompute) {
  CYPRIS_REQUIRE_GPU();
  Engine engine(with_preemption(config("cuda"), "recompute"));
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
}

TEST_F(CudaEquivalence, PreemptionBySwap) {
  CYPRIS_REQUIRE_GPU();
  Engine engine(with_preemption(config("cuda"), "swap"));
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().num_swap_outs_total, 0);
}

TEST_F(CudaEquivalence, CudaGraphsGiveTheEagerOutputs) {
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.model.enforce_eager = false;  // decode steps replay CUDA graphs; the solo reference ran eagerly
  cfg.scheduler.max_num_seqs = 24;
  Engine engine(cfg);
  expect_batch_like_solo(engine);
}

TEST(CudaEngine, SizesTheKvCacheFromGpuMemory) {
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.cache.num_gpu_blocks_override.reset();
  cfg.cache.gpu_memory_utilization = 0.3;
  Engine engine(cfg);
  // stories260k blocks are 20 KiB: 30% of any GPU holds far more than the CPU test's 2621.
  EXPECT_GT(engine.num_kv_blocks(), 10000);
}

#endif  // CYPRIS_HAVE_CUDA

}  // namespace
}  // namespace cypris
