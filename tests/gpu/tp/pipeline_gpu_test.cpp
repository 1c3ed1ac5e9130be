// -pp 2 with both stages on GPUs (ctest label `gpu`): the hand-off goes GPU to GPU by NCCL send /
// recv (TpWorkers::pipe_comm), without the host copy. The greedy tokens must be one GPU's (fp32 and
// bf16), and batched requests (micro-batches through both stages) must equal solo ones. Skips with
// fewer than 2 GPUs and without CUDA.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/runtime/model_runner.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/reference_fixture.h"
#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cuda/nccl_communicator.h"
#endif

namespace cypris {
namespace {

#ifdef CYPRIS_HAVE_CUDA
const std::string kStories = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

std::vector<int32_t> greedy(ModelRunner& runner, int steps) {
  return reference_fixture::greedy_decode(runner, {1}, static_cast<size_t>(steps));  // from BOS
}

ModelRunnerOptions options(const std::string& dtype, int pp) {
  ModelRunnerOptions o;
  o.model_dir = kStories;
  o.load.dtype = dtype;
  o.device = "cuda";
  o.pipeline_stages = pp;
  o.num_blocks = 64;
  return o;
}
#endif

TEST(GpuPipeline, TwoGpuStagesGiveOneGpusGreedyTokens) {
#ifndef CYPRIS_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (visible_cuda_devices() < 2) GTEST_SKIP() << "needs 2 GPUs, " << visible_cuda_devices() << " visible";
  ModelRunner one(options("float32", 1));
  ModelRunner two(options("float32", 2));
  ASSERT_EQ(two.pipeline_parallel_size(), 2);
  EXPECT_EQ(greedy(two, 80), greedy(one, 80));
  // bf16 activations travel as bf16 (no fp32 round trip through the host): the first tokens agree.
  ModelRunner one16(options("bfloat16", 1));
  ModelRunner two16(options("bfloat16", 2));
  EXPECT_EQ(greedy(two16, 8), greedy(one16, 8));
#endif
}

TEST(GpuPipeline, BatchedEqualsSoloThroughTwoGpuStages) {
#ifndef CYPRIS_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (visible_cuda_devices() < 2) GTEST_SKIP() << "needs 2 GPUs, " << visible_cuda_devices() << " visible";
  EngineConfig cfg = testing_support::stories_config(1, "cuda");
  cfg.model.dtype = "float32";
  cfg.parallel.pipeline_parallel_size = 2;
  const auto jobs = testing_support::make_jobs(6, 29);
  Engine engine(cfg);
  EXPECT_EQ(testing_support::greedy_story(engine), testing_support::expected_greedy_story());
  testing_support::expect_same_outputs(jobs, testing_support::run_solo(cfg, jobs),
                                       testing_support::run_batched(engine, jobs));
#endif
}

}  // namespace
}  // namespace cypris
