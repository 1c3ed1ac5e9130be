// Pipeline stages in one process (-pp, explicit layer splits, stages of tensor-parallel ranks): the
// model cut into stages of consecutive layers, the residual stream handed from stage to stage, a
// step cut into micro-batches that overlap across the stages. Every split must give the logits of
// the unsplit model (within 1e-5: the same kernels, the per-rank thread counts differ) and its
// greedy tokens, on the torch-reference fixtures of every family, on stories260k and on a GGUF file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "engine/backend/backend_factory.h"
#include "engine/common/error.h"
#include "engine/runtime/model_runner.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

using namespace reference_fixture;

const std::string kStories = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
const std::string kStoriesGguf = std::string(CYPRIS_TESTDATA_DIR) + "/gguf/stories260k-Q8_0.gguf";

// A split: pp stages (even, or `layers` per stage), tp ranks per stage, every stage on the CPU.
struct Split {
  int pp = 1;
  int tp = 1;
  std::vector<int> layers;
  std::string name() const {
    std::string s = "pp " + std::to_string(pp) + " tp " + std::to_string(tp);
    for (int n : layers) s += " " + std::to_string(n);
    return s;
  }
};

ModelRunnerOptions split_options(const std::string& path, const Split& sp, const std::string& dtype = "float32",
                                 int block_size = 16, int64_t num_blocks = 0) {
  ModelRunnerOptions o = fixture_options(path, dtype, block_size, num_blocks, sp.tp);
  o.pipeline_stages = sp.pp;
  o.stage_layers = sp.layers;
  if (!sp.layers.empty()) o.stage_devices.assign(sp.layers.size(), "cpu");
  return o;
}

class PipelineFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineFixtures, StagesGiveTheUnsplitLogits) {
  const std::string name = GetParam();
  const Expected e = load_expected(name);
  ModelRunner one(split_options(kFixtures + name, {}));
  const Logits ref = full_prefill(one, e.ids);
  const int layers = one.config().num_hidden_layers;
  std::vector<Split> splits = {{2, 1, {}}, {2, 1, {1, layers - 1}}, {layers, 1, {}}};
  if (one.config().num_attention_heads % 2 == 0 && one.config().intermediate_size % 2 == 0) {
    splits.push_back({2, 2, {}});
  }
  for (const Split& sp : splits) {
    ModelRunner staged(split_options(kFixtures + name, sp));
    EXPECT_EQ(staged.pipeline_parallel_size(), sp.pp);
    EXPECT_EQ(staged.model().num_layers(), sp.layers.empty() ? layers / sp.pp : sp.layers.front());
    const Logits got = full_prefill(staged, e.ids);
    expect_same_logits(got, ref, name + " " + sp.name());
    for (int64_t r = 0; r < got.rows; ++r) {
      EXPECT_LT(rel_err(got.row(r), e.logits[r].data(), got.vocab), 1e-4) << name << " vs torch, row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PipelineFixtures,
                         ::testing::Values("llama_gqa_tied", "llama_untied_llama3_bias", "mistral_sliding_window",
                                           "qwen3_qknorm_sliding", "qwen3_moe_top2_of_8", "qwen2_moe_shared_expert",
                                           "mixtral_top2_of_8", "phi3_fused_longrope", "gemma2_softcap_sliding",
                                           "gemma3_local_global", "cohere_parallel_block", "cohere2_sliding_nope",
                                           "cohere_plus_qk_norm"));

// Greedy decoding of BOS, one token per step, through the runner.
std::vector<int32_t> greedy(ModelRunner& runner, int steps) {
  return greedy_decode(runner, {1}, steps);
}

TEST(PipelineStories260k, GreedyTokensOfEverySplitMatchOneStage) {
  ModelRunner one(split_options(kStories, {}, "float32", 4));
  const std::vector<int32_t> ref = greedy(one, 100);
  const int layers = one.config().num_hidden_layers;  // 5
  for (const Split& sp : std::vector<Split>{{2, 1, {}}, {2, 2, {}}, {2, 1, {1, layers - 1}}, {3, 1, {1, 1, 3}}}) {
    ModelRunner staged(split_options(kStories, sp, "float32", 4));
    EXPECT_EQ(greedy(staged, 100), ref) << sp.name();
  }
}

TEST(PipelineGguf, QuantizedStagesGiveTheGreedyTokensOfOneStage) {
  ModelRunner one(split_options(kStoriesGguf, {}, "auto", 16));
  const std::vector<int32_t> ref = greedy(one, 60);
  for (const Split& sp : std::vector<Split>{{2, 1, {}}, {2, 2, {}}, {2, 1, {4, 1}}}) {
    ModelRunner staged(split_options(kStoriesGguf, sp, "auto", 16));
    EXPECT_EQ(greedy(staged, 60), ref) << sp.name();
  }
}

// Three sequences in one step: a prompt chunk, a decode and a longer prefill, in scattered blocks,
// with the logits rows in an order that is not the sequences' (as the engine plans them).
BatchContext mixed_batch(const std::vector<int32_t>& ids, int block) {
  BatchContext b;
  struct Seq {
    int32_t start, len;
    std::vector<int32_t> blocks;
  };
  const std::vector<Seq> seqs = {{0, 9, {3, 8, 1}}, {12, 1, {5, 0, 2, 9}}, {0, 14, {4, 6, 7, 10}}};
  b.max_blocks_per_seq = 4;
  b.query_start_loc.push_back(0);
  for (const Seq& s : seqs) {
    for (int32_t i = 0; i < s.len; ++i) {
      const int32_t p = s.start + i;
      b.token_ids.push_back(ids[static_cast<size_t>(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(int64_t{s.blocks[static_cast<size_t>(p / block)]} * block + p % block);
    }
    b.query_start_loc.push_back(b.query_start_loc.back() + s.len);
    b.seq_lens.push_back(s.start + s.len);
    std::vector<int32_t> row = s.blocks;
    row.resize(4, -1);
    b.block_tables.insert(b.block_tables.end(), row.begin(), row.end());
    b.max_query_len = std::max(b.max_query_len, s.len);
    b.max_seq_len = std::max(b.max_seq_len, s.start + s.len);
  }
  // Rows: the long prefill's last token, the decode, the first chunk's last two tokens.
  b.logits_indices = {b.query_start_loc[3] - 1, b.query_start_loc[2] - 1, 7, 8};
  return b;
}

TEST(PipelineMicroBatches, MixedStepsGiveTheLogitsOfOneStageWhateverTheSplit) {
  const Expected e = load_expected("llama_gqa_tied");
  std::vector<int32_t> ids = e.ids;
  while (ids.size() < 16) ids.push_back(ids[ids.size() % e.ids.size()]);
  constexpr int kBlock = 4;
  // The decode's context (12 tokens of blocks 5, 0, 2) is written by a prefill step first.
  BatchContext warm = make_single_sequence_batch(std::span<const int32_t>(ids.data(), 12), 0, kBlock);
  warm.block_tables = {5, 0, 2};
  warm.max_blocks_per_seq = 3;
  for (int32_t i = 0; i < 12; ++i)
    warm.slot_mapping[static_cast<size_t>(i)] = int64_t{warm.block_tables[i / kBlock]} * kBlock + i % kBlock;
  const BatchContext step = mixed_batch(ids, kBlock);

  ModelRunner one(split_options(kFixtures + "llama_gqa_tied", {}, "float32", kBlock, 12));
  one.execute(warm);
  const Logits ref = one.execute(step);
  ASSERT_EQ(ref.rows, 4);
  for (int micro : {1, 2, 3, 8}) {
    ModelRunnerOptions o = split_options(kFixtures + "llama_gqa_tied", {2, 1, {}}, "float32", kBlock, 12);
    o.micro_batches = micro;
    ModelRunner staged(o);
    staged.execute(warm);
    expect_same_logits(staged.execute(step), ref, "micro-batches " + std::to_string(micro));
    // Both stages worked, and the wall time covers their work.
    const std::vector<StageStats> stats = staged.stage_stats();
    ASSERT_EQ(stats.size(), 2u);
    EXPECT_EQ(stats[0].first_layer, 0);
    EXPECT_EQ(stats[0].end_layer, 1);
    EXPECT_EQ(stats[1].end_layer, 2);
    EXPECT_GT(stats[0].busy_seconds, 0);
    EXPECT_GT(stats[1].busy_seconds, 0);
    EXPECT_GE(staged.pipeline_seconds(), stats[1].busy_seconds);
  }
}

TEST(PipelineStages, CacheHoldsOnlyEachStagesLayersAndBlockMovesFollow) {
  // Per block the split model holds the same K/V bytes in all (each stage its layers' share).
  ModelRunner one(split_options(kStories, {}, "float32", 4, 16));
  ModelRunner two(split_options(kStories, {2, 1, {2, 3}}, "float32", 4, 16));
  EXPECT_EQ(two.kv_cache_bytes_per_block(), one.kv_cache_bytes_per_block());
  EXPECT_EQ(two.num_blocks(), one.num_blocks());
  EXPECT_EQ(two.model().num_layers(), 2);  // stage 0
  // A prompt in blocks 0-2, copied to 3-5 (copy-on-write), then decoding from the copies: every
  // stage's cache must have been copied.
  std::vector<int32_t> prompt = {1, 300, 27, 44, 9, 120, 33, 5, 71, 18};
  for (ModelRunner* r : {&one, &two}) r->execute(make_single_sequence_batch(prompt, 0, 4));
  const std::vector<BlockCopy> cow = {{0, 3}, {1, 4}, {2, 5}};
  for (ModelRunner* r : {&one, &two}) r->copy_blocks(cow);
  const int32_t tok[] = {77};
  BatchContext b = make_single_sequence_batch(tok, 10, 4);
  b.block_tables = {3, 4, 5};
  b.max_blocks_per_seq = 3;
  b.slot_mapping[0] = 5 * 4 + 2;
  expect_same_logits(two.execute(b), one.execute(b), "decode from copied blocks");
}

TEST(PipelineStages, BadSplitsAreErrorsNamingTheOption) {
  const Expected e = load_expected("llama_gqa_tied");  // 2 layers
  auto expect_error = [](const ModelRunnerOptions& o, const std::string& text) {
    try {
      ModelRunner r(o);
      FAIL() << "expected an error containing " << text;
    } catch (const Error& err) {
      EXPECT_THAT(err.what(), ::testing::HasSubstr(text));
    }
  };
  expect_error(split_options(kFixtures + "llama_gqa_tied", {3, 1, {}}), "--pipeline-parallel-size 3 must be in [1, 2]");
  expect_error(split_options(kFixtures + "llama_gqa_tied", {2, 1, {2, 1}}), "pipeline stage 1: layers [2, 3)");
  expect_error(split_options(kFixtures + "llama_gqa_tied", {2, 1, {1, 0}}), "pipeline stage 1: layers [1, 1)");
  ModelRunnerOptions o = split_options(kFixtures + "llama_gqa_tied", {});
  o.gpu_layers = -2;
  expect_error(o, "--gpu-layers -2 must be -1 (auto)");
}

TEST(PipelineStages, GpuLayersWithoutAGpuRunOnTheCpuOrAreRefused) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  ModelRunnerOptions o = split_options(kFixtures + "llama_gqa_tied", {});
  o.gpu_layers = -1;  // auto: nothing fits on a GPU that is not there
  ModelRunner r(o);
  EXPECT_EQ(r.pipeline_parallel_size(), 1);
  EXPECT_EQ(r.backend().device(), Device::Cpu);
  o.gpu_layers = 1;
  try {
    ModelRunner bad(o);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), ::testing::HasSubstr("--gpu-layers 1 puts layers on a GPU"));
  }
}

}  // namespace
}  // namespace cypris
