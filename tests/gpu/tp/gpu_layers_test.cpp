// --gpu-layers on a GPU (ctest label `gpu`): the first layers on the GPU, the rest on the CPU, as
// two pipeline stages in one process. The greedy story of stories260k must be the CPU's, with fp32
// weights (fp32 activations on the GPU) and with bf16 ones (the hand-off converts bf16 <-> fp32), and
// a GGUF file's greedy tokens those of the CPU alone. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/core/engine.h"
#include "engine/runtime/model_runner.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

const std::string kStories = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

std::vector<int32_t> greedy(ModelRunner& runner, int steps) {
  return reference_fixture::greedy_decode(runner, {1}, static_cast<size_t>(steps));  // from BOS
}

ModelRunnerOptions options(const std::string& model, const std::string& dtype, std::optional<int> gpu_layers) {
  ModelRunnerOptions o;
  o.model_dir = model;
  o.load.dtype = dtype;
  o.threads = 2;
  o.device = gpu_layers ? "cuda" : "cpu";
  o.gpu_layers = gpu_layers;
  o.num_blocks = 64;
  return o;
}

TEST(GpuLayers, StoriesGreedyTokensMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
  ModelRunner cpu(options(kStories, "float32", std::nullopt));
  const std::vector<int32_t> ref = greedy(cpu, 80);
  for (int n : {1, 3}) {
    ModelRunner split(options(kStories, "float32", n));
    ASSERT_EQ(split.pipeline_parallel_size(), 2);
    EXPECT_EQ(split.backend().device(), Device::Cuda);  // stage 0
    EXPECT_EQ(greedy(split, 80), ref) << "--gpu-layers " << n;
    const std::vector<StageStats> stats = split.stage_stats();
    EXPECT_EQ(stats[0].device, "cuda");
    EXPECT_EQ(stats[1].device, "cpu");
    EXPECT_EQ(stats[0].end_layer, n);
  }
}

TEST(GpuLayers, Bf16GpuStageHandsOffToTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
  // bf16 weights on both sides; the GPU stage computes in bf16, so compare the first tokens only.
  ModelRunner cpu(options(kStories, "bfloat16", std::nullopt));
  ModelRunner split(options(kStories, "bfloat16", 2));
  EXPECT_EQ(greedy(split, 8), greedy(cpu, 8));
}

TEST(GpuLayers, GgufAutoAndEngine) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
  const std::string gguf = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/stories260k-Q8_0.gguf";
  ModelRunner cpu(options(gguf, "auto", std::nullopt));
  ModelRunner split(options(gguf, "auto", 2));
  EXPECT_EQ(greedy(split, 40), greedy(cpu, 40));
  // auto: a tiny model fits whole on the GPU.
  ModelRunner all(options(gguf, "auto", -1));
  EXPECT_EQ(all.pipeline_parallel_size(), 1);
  EXPECT_EQ(all.backend().device(), Device::Cuda);
  // Through the engine: the known greedy story.
  EngineConfig cfg = testing_support::stories_config(1, "auto");
  cfg.device.gpu_layers = 2;
  Engine engine(cfg);
  EXPECT_EQ(testing_support::greedy_story(engine), testing_support::expected_greedy_story());
}

}  // namespace
}  // namespace cypris
