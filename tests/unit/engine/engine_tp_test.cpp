// The engine core with the model split over CPU ranks (--tensor-parallel-size 2) or into pipeline
// stages (--pipeline-parallel-size 2, alone or with -tp 2): continuous batching, chunked prefill and
// preemption by swap must give the greedy outputs of the unsplit model run one request at a time,
// and the known greedy story.
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

EngineConfig pp_config(int pp, int tp = 1) {
  EngineConfig cfg = stories_config(tp);
  cfg.parallel.pipeline_parallel_size = pp;
  return cfg;
}

// The unsplit model, one request at a time, is the reference.
class TpEquivalence : public EquivalenceSuite<TpEquivalence> {
 public:
  static EngineConfig solo_config() { return config(1); }
};

TEST_F(TpEquivalence, ContinuousBatchingTp2) {
  Engine engine(config(2));
  expect_batch_like_solo(engine);
}

TEST_F(TpEquivalence, ChunkedPrefillTp2) {
  Engine engine(with_chunked_prefill(config(2)));
  expect_batch_like_solo(engine);
}

TEST_F(TpEquivalence, PreemptionBySwapTp2) {
  Engine engine(with_preemption(config(2), "swap"));
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().num_swap_outs_total, 0);
}

TEST_F(TpEquivalence, PreemptionByRecomputeTp4) {
  Engine engine(with_preemption(config(4), "recompute"));
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
}

TEST_F(TpEquivalence, ContinuousBatchingPp2) {
  Engine engine(pp_config(2));
  expect_batch_like_solo(engine);
}

TEST_F(TpEquivalence, ChunkedPrefillPp2Tp2) {
  Engine engine(with_chunked_prefill(pp_config(2, 2)));
  expect_batch_like_solo(engine);
}

TEST_F(TpEquivalence, PreemptionBySwapPp3) {
  Engine engine(with_preemption(pp_config(3), "swap"));
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().num_swap_outs_total, 0);
}

TEST(PpEngine, StoriesGreedyTextFromBos) {
  for (int pp : {2, 5}) {
    Engine engine(pp_config(pp));
    EXPECT_EQ(greedy_story(engine), expected_greedy_story()) << "pp " << pp;
  }
}

TEST(TpEngine, StoriesGreedyTextFromBos) {
  for (int tp : {2, 4}) {
    Engine engine(config(tp));
    EXPECT_EQ(greedy_story(engine), expected_greedy_story()) << "tp " << tp;
  }
}

TEST(TpEngine, StartUpChecksNameTheOption) {
  try {
    Engine engine(config(3));  // 8 attention heads
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--tensor-parallel-size 3 must divide the number of attention heads"));
  }
  try {
    Engine engine(pp_config(6));  // 5 layers
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--pipeline-parallel-size 6 must be in [1, 5]"));
  }
  EngineConfig gl = config(1);
  gl.device.gpu_layers = 2;
  gl.device.device = "cpu";
  try {
    Engine engine(gl);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--gpu-layers splits the model between the GPU and the CPU"));
  }
}

}  // namespace
}  // namespace cypris
