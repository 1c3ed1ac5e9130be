// Tensor parallelism on CPU ranks: the model split over 2 and 4 ranks (column-parallel q/k/v and
// gate/up, row-parallel o/down, vocab-parallel embedding and LM head, KV heads sharded or
// replicated) gives the logits of the unsplit model within 1e-5 and the same greedy tokens, on
// the tiny random fixtures (checked against their torch reference too) and on stories260k.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/runtime/model_runner.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

using namespace reference_fixture;

const std::string kStories = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";

ModelRunnerOptions options(const std::string& dir, int tp, const std::string& dtype = "float32", int block_size = 16,
                           int64_t num_blocks = 0) {
  return fixture_options(dir, dtype, block_size, num_blocks, tp);
}

class TpFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(TpFixtures, SplitModelsGiveTheUnsplitLogits) {
  const std::string name = GetParam();
  const Expected e = load_expected(name);
  // 16-bit fixtures keep their stored dtype: the ranks then hold slices of the same rounded weights.
  const std::string dtype = name.ends_with("16") ? "auto" : "float32";
  ModelRunner one(options(kFixtures + name, 1, dtype));
  const Logits ref = full_prefill(one, e.ids);
  for (int tp : {2, 4}) {
    ModelRunner split(options(kFixtures + name, tp, dtype));
    EXPECT_EQ(split.tensor_parallel_size(), tp);
    const Logits got = full_prefill(split, e.ids);
    expect_same_logits(got, ref, name + " tp " + std::to_string(tp));
    if (dtype == "float32") {
      for (int64_t r = 0; r < got.rows; ++r) {
        EXPECT_LT(rel_err(got.row(r), e.logits[r].data(), got.vocab), 1e-4) << name << " vs torch, row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TpFixtures,
                         ::testing::Values("llama_gqa_tied", "llama_gqa_tied_bf16", "llama_gqa_tied_f16",
                                           "llama_untied_llama3_bias", "llama_linear", "llama_dynamic", "llama_yarn",
                                           "mistral_sliding_window", "qwen2_bias_sliding"));

TEST(TpRanks, KvHeadsPerRankAndCacheSize) {
  // 4 query heads, 2 KV heads: sharded at tp 2, replicated (one per rank) at tp 4.
  ModelRunner one(options(kFixtures + "llama_gqa_tied", 1));
  ModelRunner two(options(kFixtures + "llama_gqa_tied", 2));
  ModelRunner four(options(kFixtures + "llama_gqa_tied", 4));
  EXPECT_EQ(one.model().num_kv_heads(), 2);
  EXPECT_EQ(two.model().num_kv_heads(), 1);
  EXPECT_EQ(four.model().num_kv_heads(), 1);
  EXPECT_EQ(two.kv_cache_bytes_per_block(), one.kv_cache_bytes_per_block());
  EXPECT_EQ(four.kv_cache_bytes_per_block(), 2 * one.kv_cache_bytes_per_block());
}

// Chunked prefill, decode and mixed batches over scattered blocks, then copy-on-write and a swap
// round trip of the blocks: every rank's cache shard must follow.
TEST(TpRanks, PagedStepsAndBlockMovesMatchTheUnsplitModel) {
  for (const std::string name : {"llama_gqa_tied", "mistral_sliding_window", "qwen2_bias_sliding"}) {
    const Expected e = load_expected(name);
    constexpr int kBlock = 4;
    std::vector<std::unique_ptr<ModelRunner>> runners;
    for (int tp : {1, 2, 4}) {
      runners.push_back(std::make_unique<ModelRunner>(options(kFixtures + name, tp, "float32", kBlock, 16)));
      runners.back()->allocate_swap_space(8);
    }
    auto step = [&](const std::vector<int32_t>& blocks, int32_t start, int32_t len) {
      std::vector<int32_t> ids(e.ids.begin() + start, e.ids.begin() + start + len);
      BatchContext b = make_single_sequence_batch(ids, start, kBlock);
      b.block_tables = blocks;
      b.max_blocks_per_seq = static_cast<int32_t>(blocks.size());
      for (int32_t i = 0; i < len; ++i) {
        b.slot_mapping[i] = int64_t{blocks[(start + i) / kBlock]} * kBlock + (start + i) % kBlock;
      }
      const Logits ref = runners[0]->execute(b);
      for (size_t k = 1; k < runners.size(); ++k) {
        expect_same_logits(runners[k]->execute(b), ref,
                           name + " tp " + std::to_string(k * 2) + " at " + std::to_string(start));
      }
      EXPECT_LT(rel_err(ref.row(0), e.logits[start + len - 1].data(), ref.vocab), 1e-4) << name;
    };
    const std::vector<int32_t> blocks = {7, 2, 9, 4, 11};
    step(blocks, 0, 7);
    step(blocks, 7, 1);
    step(blocks, 8, 5);
    // Copy-on-write of the first three blocks to fresh ones, then continue from the copies.
    const std::vector<BlockCopy> cow = {{7, 0}, {2, 1}, {9, 3}, {4, 5}};
    for (auto& r : runners) r->copy_blocks(cow);
    step({0, 1, 3, 5, 6}, 13, 2);
    // Swap out, scribble over the cache with another sequence, swap back in, continue.
    const std::vector<BlockCopy> out = {{0, 0}, {1, 1}, {3, 2}, {5, 3}};
    const std::vector<BlockCopy> in = {{0, 12}, {1, 13}, {2, 14}, {3, 15}};
    for (auto& r : runners) r->swap_out(out);
    for (auto& r : runners) {
      std::vector<int32_t> other(e.ids.rbegin(), e.ids.rbegin() + 12);
      BatchContext b = make_single_sequence_batch(other, 0, kBlock);
      b.block_tables = {0, 1, 3};
      b.max_blocks_per_seq = 3;
      for (int32_t i = 0; i < 12; ++i) b.slot_mapping[i] = int64_t{b.block_tables[i / kBlock]} * kBlock + i % kBlock;
      r->execute(b);
    }
    for (auto& r : runners) r->swap_in(in);
    step({12, 13, 14, 15, 6}, 15, 5);
  }
}

// Greedy decoding of BOS, with the logits of every step.
std::vector<int32_t> greedy(ModelRunner& runner, int steps, std::vector<Logits>* logits) {
  return greedy_decode(runner, {1}, steps, logits);
}

TEST(TpStories260k, GreedyTokensAndLogitsMatchTpOne) {
  // 8 query heads and 4 KV heads: tp 2 shards both, tp 4 leaves one KV head per rank.
  std::vector<Logits> ref_logits;
  ModelRunner one(options(kStories, 1, "float32", 4));
  const std::vector<int32_t> ref = greedy(one, 120, &ref_logits);
  for (int tp : {2, 4}) {
    std::vector<Logits> logits;
    ModelRunner split(options(kStories, tp, "float32", 4));
    EXPECT_EQ(greedy(split, 120, &logits), ref) << "tp " << tp;
    double worst = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      worst = std::max(worst, rel_err(logits[i].row(0), ref_logits[i].row(0), ref_logits[i].vocab));
    }
    EXPECT_LT(worst, 1e-5) << "tp " << tp;
  }
}

TEST(TpStories260k, PromptBatchOfAllPositionsMatchesTpOne) {
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>(3 + (i * 37) % 500));
  ModelRunner one(options(kStories, 1, "auto"));
  ModelRunner two(options(kStories, 2, "auto"));  // fp16 weights on every rank
  expect_same_logits(full_prefill(two, prompt), full_prefill(one, prompt), "stories260k fp16 tp 2");
}

// A model folder with only a config.json (dummy weights: the same values whatever the sharding).
std::string dummy_model(int64_t vocab, bool tied) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cypris_tp_vocab_" + std::to_string(::getpid()) + "_" + std::to_string(vocab) + (tied ? "t" : "u"));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures":["LlamaForCausalLM"],"hidden_size":32,
      "intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
      "max_position_embeddings":64,"rms_norm_eps":1e-5,"torch_dtype":"float32","vocab_size":)"
                                     << vocab << R"(,"tie_word_embeddings":)" << (tied ? "true" : "false") << "}";
  return dir.string();
}

TEST(TpRanks, VocabulariesThatDoNotSplitEvenly) {
  // 67 (prime: every rank reads row by row), 70 over 4 ranks (slices of 18: chunks of 2 rows),
  // 9 over 4 ranks (slices of 3: the last rank holds no row at all).
  for (const int64_t vocab : {67, 70, 9}) {
    for (const bool tied : {true, false}) {
      const std::string dir = dummy_model(vocab, tied);
      std::vector<int32_t> ids;
      for (int i = 0; i < 12; ++i) ids.push_back(static_cast<int32_t>((i * 7 + 3) % vocab));
      ids.push_back(static_cast<int32_t>(vocab - 1));  // the last row, on the last non-empty rank
      auto opt = [&](int tp) {
        ModelRunnerOptions o = options(dir, tp);
        o.load.load_format = "dummy";
        o.load.seed = 7;
        return o;
      };
      ModelRunner one(opt(1));
      const Logits ref = full_prefill(one, ids);
      for (int tp : {2, 4}) {
        ModelRunner split(opt(tp));
        expect_same_logits(
            full_prefill(split, ids), ref,
            "vocab " + std::to_string(vocab) + (tied ? " tied" : " untied") + " tp " + std::to_string(tp));
      }
      std::filesystem::remove_all(dir);
    }
  }
}

TEST(TpRanks, SizesThatDoNotDivideTheHeadsAreRefused) {
  try {
    ModelRunner r(options(kStories, 3));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--tensor-parallel-size 3 must divide the number of attention heads"));
  }
  // 4 query heads cannot go over 8 ranks.
  EXPECT_THROW(ModelRunner r(options(kFixtures + "llama_gqa_tied", 8)), Error);
}

TEST(TpRanks, BadBatchFailsTheStepAndTheRanksStayUsable) {
  ModelRunner two(options(kFixtures + "llama_gqa_tied", 2, "float32", 4, 8));
  BatchContext bad = make_single_sequence_batch(std::vector<int32_t>{1, 2, 3}, 0, 4);
  bad.token_ids[1] = 1000;  // outside the vocabulary of 64
  EXPECT_THROW(two.execute(bad), Error);
  ModelRunner one(options(kFixtures + "llama_gqa_tied", 1, "float32", 4, 8));
  const std::vector<int32_t> ids = {1, 2, 3};
  expect_same_logits(two.execute(make_single_sequence_batch(ids, 0, 4)),
                     one.execute(make_single_sequence_batch(ids, 0, 4)), "after a failed step");
}

}  // namespace
}  // namespace cypris
