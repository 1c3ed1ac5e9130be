// The engine core with the model split over CPU ranks (--tensor-parallel-size 2): continuous
// batching, chunked prefill and preemption by swap must give the greedy outputs of the unsplit
// model run one request at a time, and the known greedy story.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/core/sampling_params.h"

namespace cypris {
namespace {

const std::string kModel = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

EngineConfig config(int tp) {
  EngineConfig cfg;
  cfg.model.model = kModel;
  cfg.model.dtype = "float32";
  cfg.device.threads = 2;
  cfg.logging.disable_log_stats = true;
  cfg.logging.disable_log_requests = true;
  cfg.cache.cpu_kvcache_space = 0.05;
  cfg.parallel.tensor_parallel_size = tp;
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
    while (static_cast<int>(j.prompt.size()) < std::max(len, 2))
      j.prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
    j.max_tokens = 1 + static_cast<int>(rng() % 40);
    if (static_cast<int>(j.prompt.size()) + j.max_tokens > 512) j.max_tokens = 512 - static_cast<int>(j.prompt.size());
    j.submit_step = static_cast<int>(rng() % 30);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

GenerateRequest make_request(const Job& j) {
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = j.max_tokens;
  p->ignore_eos = true;
  GenerateRequest r;
  r.request_id = j.id;
  r.prompt_token_ids = j.prompt;
  r.params = p;
  return r;
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
      streams[j.id] = std::make_shared<RequestStream>(j.id);
      engine.add_request(make_request(j), streams[j.id]);
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

class TpEquivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    jobs_ = new std::vector<Job>(make_jobs(64, 1234));
    solo_ = new std::map<std::string, std::vector<int32_t>>();
    Engine engine(config(1));  // the unsplit model, one request at a time
    for (const auto& j : *jobs_) {
      Job solo = j;
      solo.submit_step = 0;
      (*solo_)[j.id] = run_batched(engine, {solo})[j.id];
    }
  }
  static void TearDownTestSuite() {
    delete jobs_;
    delete solo_;
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
std::vector<Job>* TpEquivalence::jobs_ = nullptr;
std::map<std::string, std::vector<int32_t>>* TpEquivalence::solo_ = nullptr;

TEST_F(TpEquivalence, ContinuousBatchingTp2) {
  Engine engine(config(2));
  expect_same(run_batched(engine, *jobs_));
}

TEST_F(TpEquivalence, ChunkedPrefillTp2) {
  EngineConfig cfg = config(2);
  cfg.scheduler.enable_chunked_prefill = true;
  cfg.scheduler.max_num_batched_tokens = 64;
  cfg.scheduler.max_num_seqs = 16;
  Engine engine(cfg);
  expect_same(run_batched(engine, *jobs_));
}

TEST_F(TpEquivalence, PreemptionBySwapTp2) {
  EngineConfig cfg = config(2);
  cfg.cache.num_gpu_blocks_override = 40;
  cfg.scheduler.preemption_mode = "swap";
  cfg.cache.swap_space = 0.01;
  Engine engine(cfg);
  expect_same(run_batched(engine, *jobs_));
  EXPECT_GT(engine.stats().num_swap_outs_total, 0);
}

TEST_F(TpEquivalence, PreemptionByRecomputeTp4) {
  EngineConfig cfg = config(4);
  cfg.cache.num_gpu_blocks_override = 40;
  cfg.scheduler.preemption_mode = "recompute";
  Engine engine(cfg);
  expect_same(run_batched(engine, *jobs_));
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
}

TEST(TpEngine, StoriesGreedyTextFromBos) {
  std::ifstream in(kModel + "/expected_greedy_200_from_bos.txt");
  std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!expected.empty() && expected.back() == '\n') expected.pop_back();
  for (int tp : {2, 4}) {
    Engine engine(config(tp));
    auto p = std::make_shared<SamplingParams>();
    p->temperature = 0.0f;
    p->max_tokens = 200;
    p->ignore_eos = true;
    auto stream = std::make_shared<RequestStream>("s");
    engine.add_request(GenerateRequest{"s", {1}, "", p, 0}, stream);
    while (engine.has_unfinished_requests()) engine.step();
    std::string text;
    while (auto o = stream->next(std::chrono::milliseconds(0))) {
      for (const auto& d : o->outputs) text += d.text;
    }
    EXPECT_EQ(text, expected) << "tp " << tp;
  }
}

TEST(TpEngine, StartUpChecksNameTheOption) {
  try {
    Engine engine(config(3));  // 8 attention heads
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--tensor-parallel-size 3 must divide the number of attention heads"));
  }
  EngineConfig pp = config(1);
  pp.parallel.pipeline_parallel_size = 2;
  try {
    Engine engine(pp);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("not supported yet"));
  }
}

}  // namespace
}  // namespace cypris
