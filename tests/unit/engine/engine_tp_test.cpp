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
