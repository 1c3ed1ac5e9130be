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
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"

namespace cypris {
namespace {

using namespace testing_support;

EngineConfig config(int tp) { return stories_config(tp); }

class TpEquivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    jobs_ = new std::vector<Job>(make_jobs(64, 1234));
    solo_ = new Outputs(run_solo(config(1), *jobs_));  // the unsplit model, one request at a time
  }
  static void TearDownTestSuite() {
    delete jobs_;
    delete solo_;
  }
  void expect_same(const Outputs& got) { expect_same_outputs(*jobs_, *solo_, got); }
  static std::vector<Job>* jobs_;
  static Outputs* solo_;
};
std::vector<Job>* TpEquivalence::jobs_ = nullptr;
Outputs* TpEquivalence::solo_ = nullptr;

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
  std::ifstream in(std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k/expected_greedy_200_from_bos.txt");
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
