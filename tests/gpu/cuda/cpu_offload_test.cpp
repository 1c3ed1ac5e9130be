// --cpu-offload-gb on a GPU (ctest label `gpu`; skips without one): the last decoder layers' weights
// in pinned host memory, copied into two staging slots on the GPU before each use
// (engine/backend/cuda/weight_streamer.h). Greedy tokens and logits must be those of the same model
// with every weight resident: a 16-bit model fixture, stories260k and a Q8_0 GGUF file (quantized
// blocks are bytes to the streamer), eagerly and replaying the decode CUDA graphs (the copies are
// captured as graph nodes). Also what the backend reports: layers, pinned bytes, no weight left
// resident, staging slots. Not checked here: the KV cache's share of the freed memory (a fixture's
// layers are smaller than the noise of the device's other allocations).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/backend/layer_weight_hooks.h"
#include "engine/runtime/model_runner.h"
#include "tests/gpu/cuda/gpu_test_util.h"

CYPRIS_SKIPPED_WITHOUT_CUDA(CpuOffload)

#ifdef CYPRIS_HAVE_CUDA
namespace cypris {
namespace {

const std::string kStories = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
const std::string kGguf = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/stories260k-Q8_0.gguf";
const std::string kFixture = std::string(CYPRIS_FIXTURES_DIR) + "/models/llama_gqa_tied";
constexpr double kOneByte = 1.0 / (1024.0 * 1024.0 * 1024.0);  // in GiB: the last layer alone

ModelRunnerOptions options(const std::string& model, const std::string& dtype, double offload_gb, bool eager) {
  ModelRunnerOptions o;
  o.model_dir = model;
  o.load.dtype = dtype;
  o.device = "cuda";
  o.num_blocks = 64;
  o.max_num_seqs = 4;
  o.enforce_eager = eager;
  o.max_seq_len_to_capture = 256;
  o.cpu_offload_gb = offload_gb;
  return o;
}

struct Run {
  std::vector<float> prefill;  // logits of the prompt's last position
  std::vector<int32_t> tokens;
};

Run greedy(ModelRunner& runner, int steps) {
  std::vector<int32_t> ids = {1, 5, 9, 13, 7};  // in every fixture's vocabulary
  Logits l = runner.execute(make_single_sequence_batch(ids, 0, runner.block_size()));
  Run r;
  r.prefill.assign(l.row(0), l.row(0) + l.vocab);
  for (int i = 0; i < steps; ++i) {
    int32_t next = 0;
    for (int64_t v = 1; v < l.vocab; ++v) next = l.row(0)[v] > l.row(0)[next] ? static_cast<int32_t>(v) : next;
    r.tokens.push_back(next);
    ids.push_back(next);
    const int32_t tok[] = {next};
    l = runner.execute(make_single_sequence_batch(tok, static_cast<int32_t>(ids.size()) - 1, runner.block_size()));
  }
  return r;
}

WeightOffloadStats stats_of(ModelRunner& runner) {
  LayerWeightHooks* hooks = layer_weight_hooks(runner.backend());
  EXPECT_NE(hooks, nullptr) << "the CUDA backend streams weights";
  return hooks ? hooks->weight_offload_stats() : WeightOffloadStats{};
}

void expect_same_with_offload(const std::string& model, const std::string& dtype) {
  for (bool eager : {true, false}) {
    SCOPED_TRACE(eager ? "eager" : "CUDA graphs");
    ModelRunner resident(options(model, dtype, 0, eager));
    const Run ref = greedy(resident, 40);
    EXPECT_EQ(stats_of(resident).layers, 0);
    const int layers = resident.config().num_hidden_layers;
    for (double gb : {kOneByte, 1e6}) {
      SCOPED_TRACE("--cpu-offload-gb " + std::to_string(gb));
      ModelRunner offload(options(model, dtype, gb, eager));
      if (!eager) EXPECT_GT(offload.num_cuda_graphs(), 0);
      const WeightOffloadStats s = stats_of(offload);
      EXPECT_EQ(s.layers, gb == kOneByte ? 1 : layers);
      EXPECT_GT(s.host_bytes, 0);
      EXPECT_EQ(s.resident_bytes, 0);  // the estimate's slots held every weight
      EXPECT_GT(s.staging_bytes, 0);
      const Run got = greedy(offload, 40);
      EXPECT_EQ(got.tokens, ref.tokens);
      EXPECT_LE(gpu_test::norm_err(got.prefill, ref.prefill), 1e-6);
    }
  }
}

TEST(CpuOffload, Fp16FixtureGivesTheResidentModelsTokensAndLogits) {
  CYPRIS_REQUIRE_GPU();
  expect_same_with_offload(kFixture, "float16");
}

TEST(CpuOffload, StoriesGivesTheResidentModelsTokensAndLogits) {
  CYPRIS_REQUIRE_GPU();
  expect_same_with_offload(kStories, "float32");
}

TEST(CpuOffload, GgufQ8_0StreamsItsBlocks) {
  CYPRIS_REQUIRE_GPU();
  expect_same_with_offload(kGguf, "auto");
}

TEST(CpuOffload, WithGpuLayersTheGpuStageOffloadsItsOwnLayers) {
  CYPRIS_REQUIRE_GPU();
  ModelRunnerOptions cpu = options(kStories, "float32", 0, true);
  cpu.device = "cpu";
  ModelRunner reference(cpu);
  ModelRunnerOptions o = options(kStories, "float32", 1e6, true);
  o.gpu_layers = 3;
  ModelRunner split(o);
  ASSERT_EQ(split.pipeline_parallel_size(), 2);
  EXPECT_EQ(stats_of(split).layers, 3);  // every layer of the GPU stage, none of the CPU's
  EXPECT_EQ(greedy(split, 40).tokens, greedy(reference, 40).tokens);
}

}  // namespace
}  // namespace cypris
#endif
