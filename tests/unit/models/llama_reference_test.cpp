// Logits of tiny random Llama / Mistral / Qwen2 models against the independent torch reference
// (tests/tools/gen_llama_fixtures.py): GQA, tied and untied heads, biases, sliding windows, every
// RoPE variant, 16-bit weights; and the paged path (chunked prefill, decode, mixed batches with
// scattered blocks) against one full prefill.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_communicator.h"
#include "engine/runtime/debug_dump.h"
#include "engine/runtime/model_runner.h"
#include "models/registry/registry.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

using namespace reference_fixture;

ModelRunnerOptions options(const std::string& name, const std::string& dtype, int block_size = 16,
                           int64_t num_blocks = 0) {
  return fixture_options(kFixtures + name, dtype, block_size, num_blocks);
}

class ReferenceLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceLogits, FullPrefillMatchesTorchReference) {
  const std::string name = GetParam();
  const Expected e = load_expected(name);
  // fp32 fixtures run with fp32 weights; the 16-bit fixtures keep their stored dtype ("auto") and
  // the reference used the same rounded weights, so both compare tightly.
  const bool sixteen = name.ends_with("_bf16") || name.ends_with("_f16");
  ModelRunner runner(options(name, sixteen ? "auto" : "float32"));
  if (name.ends_with("_bf16")) EXPECT_EQ(runner.weight_dtype(), DType::BF16);
  if (name.ends_with("_f16")) EXPECT_EQ(runner.weight_dtype(), DType::F16);
  const Logits l = full_prefill(runner, e.ids);
  ASSERT_EQ(l.rows, static_cast<int64_t>(e.ids.size()));
  for (int64_t r = 0; r < l.rows; ++r) {
    EXPECT_LT(rel_err(l.row(r), e.logits[r]), 1e-4) << name << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceLogits,
                         ::testing::Values("llama_gqa_tied", "llama_gqa_tied_bf16", "llama_gqa_tied_f16",
                                           "llama_untied_llama3_bias", "llama_linear", "llama_dynamic", "llama_yarn",
                                           "mistral_sliding_window", "qwen2_bias_sliding"));

TEST(ReferenceLogits, SixteenBitWeightsStayCloseToFp32) {
  const Expected fp32 = load_expected("llama_gqa_tied");
  for (const char* name : {"llama_gqa_tied_bf16", "llama_gqa_tied_f16"}) {
    ModelRunner runner(options(name, "auto"));
    const Logits l = full_prefill(runner, fp32.ids);
    for (int64_t r = 0; r < l.rows; ++r) EXPECT_LT(rel_err(l.row(r), fp32.logits[r]), 3e-2) << name << " row " << r;
  }
}

TEST(ReferenceLogits, Fp32CheckpointLoadedAsBf16IsCloseButNotIdentical) {
  const Expected e = load_expected("llama_gqa_tied");
  ModelRunner runner(options("llama_gqa_tied", "bfloat16"));
  const Logits l = full_prefill(runner, e.ids);
  double worst = 0;
  for (int64_t r = 0; r < l.rows; ++r) worst = std::max(worst, rel_err(l.row(r), e.logits[r]));
  EXPECT_LT(worst, 3e-2);
  EXPECT_GT(worst, 1e-6);  // the weights really were rounded
}

// One sequence's part in a step: tokens [start, start + len) of ids, blocks from `blocks`.
struct Part {
  const std::vector<int32_t>* ids;
  int32_t start;
  int32_t len;
  std::vector<int32_t> blocks;
};

BatchContext make_batch(const std::vector<Part>& parts, int block_size) {
  BatchContext b;
  b.query_start_loc.push_back(0);
  int32_t max_blocks = 0;
  for (const Part& p : parts) max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>(p.blocks.size()));
  b.max_blocks_per_seq = max_blocks;
  for (const Part& p : parts) {
    for (int32_t i = p.start; i < p.start + p.len; ++i) {
      b.token_ids.push_back((*p.ids)[i]);
      b.positions.push_back(i);
      b.slot_mapping.push_back(int64_t{p.blocks[i / block_size]} * block_size + i % block_size);
      b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    }
    b.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.seq_lens.push_back(p.start + p.len);
    for (int32_t k = 0; k < max_blocks; ++k)
      b.block_tables.push_back(k < static_cast<int32_t>(p.blocks.size()) ? p.blocks[k] : 0);
  }
  return b;
}

class PagedPath : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedPath, ChunkedPrefillDecodeAndMixedBatchesMatchFullPrefill) {
  const std::string name = GetParam();
  const Expected e = load_expected(name);
  ASSERT_EQ(e.ids.size(), 20u);
  constexpr int kBlock = 4;
  ModelRunner runner(options(name, "float32", kBlock, 12));
  // Two copies of the prompt advance through the cache at different paces in the same steps,
  // in scattered blocks: one as prefill chunks, the other mostly token by token.
  const std::vector<int32_t> blocks_a = {7, 2, 9, 4, 11};
  const std::vector<int32_t> blocks_b = {0, 5, 1, 8, 3};
  const std::vector<std::vector<Part>> steps = {
      {{&e.ids, 0, 8, blocks_a}, {&e.ids, 0, 3, blocks_b}},
      {{&e.ids, 8, 1, blocks_a}, {&e.ids, 3, 1, blocks_b}},
      {{&e.ids, 3 + 1, 9, blocks_b}, {&e.ids, 9, 1, blocks_a}},
      {{&e.ids, 10, 10, blocks_a}, {&e.ids, 13, 1, blocks_b}},
      {{&e.ids, 14, 6, blocks_b}},
  };
  int checked = 0;
  for (const auto& parts : steps) {
    const Logits l = runner.execute(make_batch(parts, kBlock));
    int64_t row = 0;
    for (const Part& p : parts) {
      for (int32_t i = p.start; i < p.start + p.len; ++i, ++row) {
        EXPECT_LT(rel_err(l.row(row), e.logits[i]), 1e-4) << name << " position " << i;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 40);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PagedPath,
                         ::testing::Values("llama_gqa_tied", "mistral_sliding_window", "qwen2_bias_sliding",
                                           "llama_dynamic"));

TEST(Registry, UnknownArchitectureListsSupportedOnes) {
  ModelConfig cfg = parse_model_config(model_families(), R"({"architectures":["GPT2LMHeadModel"],"hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,
          "num_attention_heads":4,"vocab_size":16})",
      "/m/config.json");
  try {
    resolve_architecture(cfg);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("GPT2LMHeadModel"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/m/config.json"), std::string::npos) << msg;
    for (const char* a : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}) {
      EXPECT_NE(msg.find(a), std::string::npos) << msg;
    }
  }
}

TEST(DebugHook, NamesIntermediatesLayerByLayer) {
  ModelRunner runner(options("llama_gqa_tied", "float32"));
  EXPECT_EQ(runner.kv_cache_bytes_per_block(), 2 * 2 * 16 * 2 * 8 * 4);  // K+V, 2 layers, 16 tokens, 2 heads, dim 8
  std::vector<std::string> names;
  runner.set_debug_hook([&](const std::string& n, const Tensor&) { names.push_back(n); });
  const int32_t ids[] = {1, 2, 3};
  runner.execute(make_single_sequence_batch(ids, 0, runner.block_size()));
  EXPECT_EQ(names.front(), "embed");
  EXPECT_EQ(names.back(), "logits");
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.1.q_rot"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.0.mlp_out"), names.end());
}

// A tensor-parallel rank loads only its slice of the heads and of the MLP, and needs the
// communicator that joins it to the other ranks (tests/unit/tp/ runs split models end to end).
TEST(TensorParallel, RankLoadsItsSliceAndNeedsACommunicator) {
  const std::string dir = kFixtures + "llama_gqa_tied";
  const ModelConfig cfg = load_model_config(model_families(), dir);
  auto weights = open_weight_source(model_families(), dir, cfg, LoadOptions{});
  CpuBackend backend(1);
  ModelBuildOptions opt;
  opt.weight_dtype = DType::F32;
  opt.parallel = {1, 2};
  EXPECT_THROW(build_model(cfg, *weights, backend, opt), Error);  // no communicator
  auto comms = make_cpu_communicators(4);
  auto comms2 = make_cpu_communicators(2);
  opt.comm = comms2[1].get();
  auto model = build_model(cfg, *weights, backend, opt);
  EXPECT_EQ(model->num_kv_heads(), 1);
  opt.parallel = {3, 4};  // 2 KV heads over 4 ranks: each rank holds one, shared with a neighbour
  opt.comm = comms[3].get();
  EXPECT_EQ(build_model(cfg, *weights, backend, opt)->num_kv_heads(), 1);
  opt.parallel = {0, 3};  // 4 attention heads cannot split over 3 ranks
  EXPECT_THROW(build_model(cfg, *weights, backend, opt), Error);
}

TEST(DebugHook, NpyDumpHoldsTheReturnedLogits) {
  const auto dir = std::filesystem::temp_directory_path() / ("cypris_dump_" + std::to_string(::getpid()));
  ModelRunner runner(options("llama_gqa_tied", "float32"));
  runner.set_debug_hook(make_npy_dump_hook(dir));
  const int32_t ids[] = {4, 8, 15, 16};
  const Logits first = runner.execute(make_single_sequence_batch(ids, 0, runner.block_size()));
  const int32_t next[] = {23};
  const Logits second = runner.execute(make_single_sequence_batch(next, 4, runner.block_size()));
  for (const auto& [file, logits] : {std::pair{"f0.logits.npy", &first}, std::pair{"f1.logits.npy", &second}}) {
    std::ifstream in(dir / file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 10u) << file;
    ASSERT_EQ(bytes.compare(0, 6, "\x93NUMPY"), 0);
    const size_t header = 10 + static_cast<uint8_t>(bytes[8]) + 256 * static_cast<uint8_t>(bytes[9]);
    EXPECT_NE(bytes.find("'shape': (1, 64)"), std::string::npos);
    ASSERT_EQ(bytes.size(), header + 64 * 4);
    EXPECT_EQ(std::memcmp(bytes.data() + header, logits->data.data(), 64 * 4), 0) << file;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "f1.layers.1.q_rot.npy"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cypris
