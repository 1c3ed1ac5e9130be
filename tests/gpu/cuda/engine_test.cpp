// The engine core on the GPU: continuous batching, chunked prefill and preemption (recompute and
// swap through pinned host memory) must give every request the greedy output it gets alone on the
// GPU, and those must equal the CPU engine's. stories260k, fp32. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/core/engine.h"
#include "engine/core/sampling_params.h"
#endif

namespace cypris {
namespace {

#ifndef CYPRIS_HAVE_CUDA
TEST(CudaEngine, SkippedWithoutCuda) { CYPRIS_REQUIRE_GPU(); }
#else

const std::string kModel = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

EngineConfig config(const std::string& device) {
  EngineConfig cfg;
  cfg.model.model = kModel;
  cfg.model.dtype = "float32";
  cfg.device.device = device;
  cfg.device.threads = 2;
  cfg.logging.disable_log_stats = true;
  cfg.logging.disable_log_requests = true;
  cfg.cache.cpu_kvcache_space = 0.05;
  cfg.cache.num_gpu_blocks_override = 2000;  // the GPU would otherwise take most of its memory
  return cfg;
}

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  int max_tokens;
  int submit_step;
};

std::vector<Job> make_jobs(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < count; ++i) {
    Job j;
    j.id = "req-" + std::to_string(i);
    const int len = 1 + static_cast<int>((static_cast<uint64_t>(i) * 397 + rng() % 7) % 400);
    j.prompt = {1};
    while (static_cast<int>(j.prompt.size()) < std::max(len, 2)) j.prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
    j.max_tokens = 1 + static_cast<int>(rng() % 40);
    if (static_cast<int>(j.prompt.size()) + j.max_tokens > 512) j.max_tokens = 512 - static_cast<int>(j.prompt.size());
    j.submit_step = static_cast<int>(rng() % 30);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::map<std::string, std::vector<int32_t>> run_batched(Engine& engine, const std::vector<Job>& jobs) {
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  std::map<std::string, std::vector<int32_t>> out;
  std::vector<const Job*> order;
  for (const auto& j : jobs) order.push_back(&j);
  std::stable_sort(order.begin(), order.end(), [](auto a, auto b) { return a->submit_step < b->submit_step; });
  size_t submitted = 0;
  for (int step = 0; submitted < order.size() || engine.has_unfinished_requests(); ++step) {
    while (submitted < order.size() && order[submitted]->submit_step <= step) {
      const Job& j = *order[submitted++];
      auto p = std::make_shared<SamplingParams>();
      p->temperature = 0.0f;
      p->max_tokens = j.max_tokens;
      p->ignore_eos = true;
      GenerateRequest r;
      r.request_id = j.id;
      r.prompt_token_ids = j.prompt;
      r.params = p;
      streams[j.id] = std::make_shared<RequestStream>(j.id);
      engine.add_request(r, streams[j.id]);
    }
    engine.step();
    for (auto& [id, s] : streams) {
      while (auto o = s->next(std::chrono::milliseconds(0))) {
        EXPECT_FALSE(o->error.has_value()) << *o->error;
        for (const auto& d : o->outputs) out[id].insert(out[id].end(), d.token_ids.begin(), d.token_ids.end());
      }
    }
    if (step >= 100000) {
      ADD_FAILURE() << "the engine does not finish";
      break;
    }
  }
  return out;
}

std::map<std::string, std::vector<int32_t>> run_solo(const std::string& device, const std::vector<Job>& jobs) {
  Engine engine(config(device));
  std::map<std::string, std::vector<int32_t>> out;
  for (const auto& j : jobs) {
    Job solo = j;
    solo.submit_step = 0;
    out[j.id] = run_batched(engine, {solo})[j.id];
  }
  return out;
}

class CudaEquivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0) return;
    jobs_ = new std::vector<Job>(make_jobs(48, 1234));
    solo_ = new std::map<std::string, std::vector<int32_t>>(run_solo("cuda", *jobs_));
  }
  static void TearDownTestSuite() {
    delete jobs_;
    delete solo_;
    jobs_ = nullptr;
    solo_ = nullptr;
  }
  void expect_same(const std::map<std::string, std::vector<int32_t>>& got) {
    for (const auto& j : *jobs_) {
      ASSERT_EQ(got.at(j.id).size(), static_cast<size_t>(j.max_tokens)) << j.id;
      EXPECT_EQ(got.at(j.id), solo_->at(j.id)) << j.id << " (prompt " << j.prompt.size() << " tokens)";
    }
  }
  static std::vector<Job>* jobs_;
  static std::map<std::string, std::vector<int32_t>>* solo_;
};
std::vector<Job>* CudaEquivalence::jobs_ = nullptr;
std::map<std::string, std::vector<int32_t>>* CudaEquivalence::solo_ = nullptr;

TEST_F(CudaEquivalence, SoloOnGpuEqualsSoloOnCpu) {
  CYPRIS_REQUIRE_GPU();
  const auto cpu = run_solo("cpu", *jobs_);
  for (const auto& j : *jobs_) EXPECT_EQ(solo_->at(j.id), cpu.at(j.id)) << j.id;
}

TEST_F(CudaEquivalence, ContinuousBatching) {
  CYPRIS_REQUIRE_GPU();
  Engine engine(config("cuda"));
  EXPECT_EQ(engine.model_info().device, "cuda");
  expect_same(run_batched(engine, *jobs_));
}

TEST_F(CudaEquivalence, ChunkedPrefill) {
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.scheduler.enable_chunked_prefill = true;
  cfg.scheduler.max_num_batched_tokens = 64;
  cfg.scheduler.max_num_seqs = 16;
  Engine engine(cfg);
  expect_same(run_batched(engine, *jobs_));
}

TEST_F(CudaEquivalence, PreemptionByRecompute) {
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.cache.num_gpu_blocks_override = 40;
  cfg.scheduler.preemption_mode = "recompute";
  Engine engine(cfg);
  expect_same(run_batched(engine, *jobs_));
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
}

TEST_F(CudaEquivalence, PreemptionBySwap) {
  CYPRIS_REQUIRE_GPU();
  EngineConfig cfg = config("cuda");
  cfg.cache.num_gpu_blocks_override = 40;
  cfg.scheduler.preemption_mode = "swap";
  cfg.cache.swap_space = 0.01;
  Engine engine(cfg);
  expect_same(run_batched(engine, *jobs_));
  EXPECT_GT(engine.stats().num_swap_outs_total, 0);
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
