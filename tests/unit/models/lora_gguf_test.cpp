// llama.cpp's GGUF LoRA adapters (written by tests/tools/gen_lora_gguf_fixtures.py from the PEFT
// fixtures exactly as convert_lora_to_gguf.py lays them out, q/k rows of B permuted for llama's
// rotary) give the same logits as the PEFT version of the same adapter, and so the float64 merged
// reference, over the safetensors base and over the same base as a GGUF file; leaving the q rows
// in llama.cpp's order would not (the permutation matters); files that are no LoRA adapter are
// refused naming the key. Phi-3's fused attn_qkv / ffn_up map to its stacked qkv_proj / gate_up_proj.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/loader/lora_adapter.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/greedy_request.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

using namespace reference_fixture;
using ::testing::HasSubstr;

const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/llama_gqa_tied/";
const std::string kGguf = kLora + "gguf/";
constexpr double kTol = 1e-4;  // fp32 CPU against the float64 reference, relative to the row's largest logit
constexpr int kHeads = 4, kKvHeads = 2;  // llama_gqa_tied

ModelRunnerOptions lora_options(const std::string& model) {
  ModelRunnerOptions o = fixture_options(model, "float32", 16, 16);
  o.max_loras = 2;
  o.max_lora_rank = 16;
  return o;
}

LoraAdapter gguf_adapter(const std::string& name, bool unpermute = true) {
  LoraAdapter a = load_lora_adapter(kGguf + name + ".gguf", 16);
  if (unpermute) undo_gguf_qk_permutation(a, kHeads, kKvHeads);
  return a;
}

Logits prefill_in_slot(ModelRunner& runner, const std::vector<int32_t>& ids, int32_t slot) {
  BatchContext b = make_single_sequence_batch(ids, 0, runner.block_size());
  b.logits_indices.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(ids.size()); ++i) b.logits_indices.push_back(i);
  b.lora_slots.assign(ids.size(), slot);
  return runner.execute(b);
}

double max_rel_err(const Logits& got, const Expected& want) {
  double worst = 0;
  for (size_t t = 0; t < want.logits.size(); ++t) {
    worst = std::max(worst, rel_err(got.row(static_cast<int64_t>(t)), want.logits[t]));
  }
  return worst;
}

TEST(LoraGguf, TheFileHoldsThePeftAdaptersWeightsWithLlamaCppsScale) {
  for (const std::string name : {"qv_r4", "mlp_o_r2_bin"}) {
    SCOPED_TRACE(name);
    const LoraAdapter peft = load_lora_adapter(kLora + name, 16);
    const LoraAdapter gguf = gguf_adapter(name);
    EXPECT_EQ(gguf.rank, peft.rank);
    EXPECT_EQ(gguf.alpha, peft.alpha);
    EXPECT_FLOAT_EQ(gguf.scale, peft.scale);  // alpha / r, no rsLoRA in these two
    EXPECT_EQ(gguf.gguf_arch, "llama");
    ASSERT_EQ(gguf.modules.size(), peft.modules.size());
    for (const auto& [module, m] : peft.modules) {
      ASSERT_TRUE(gguf.modules.count(module)) << module;
      const LoraModule& g = gguf.modules.at(module);
      EXPECT_EQ(g.a.shape, m.a.shape) << module;
      EXPECT_EQ(g.b.shape, m.b.shape) << module;
      EXPECT_EQ(std::memcmp(g.a.buffer.data(), m.a.buffer.data(), m.a.buffer.size()), 0) << module << " A";
      EXPECT_EQ(std::memcmp(g.b.buffer.data(), m.b.buffer.data(), m.b.buffer.size()), 0) << module << " B";
    }
  }
}

TEST(LoraGguf, SameLogitsAsThePeftAdapterOnSafetensorsAndGgufBases) {
  for (const std::string base : {kFixtures + "llama_gqa_tied", kGguf + "base-F32.gguf"}) {
    SCOPED_TRACE(base);
    ModelRunner runner(lora_options(base));
    for (const std::string name : {"qv_r4", "mlp_o_r2_bin"}) {
      SCOPED_TRACE(name);
      const Expected want = load_expected_from(kLora + name);
      runner.load_lora(1, gguf_adapter(name));
      const Logits gguf = prefill_in_slot(runner, want.ids, 1);
      EXPECT_LT(max_rel_err(gguf, want), kTol);
      runner.load_lora(0, load_lora_adapter(kLora + name, 16));
      expect_same_logits(gguf, prefill_in_slot(runner, want.ids, 0), "GGUF vs PEFT");
    }
    // q's B rows left in llama.cpp's interleaved order: a different model (the test can fail).
    const Expected want = load_expected_from(kLora + "qv_r4");
    runner.load_lora(1, gguf_adapter("qv_r4", /*unpermute=*/false));
    EXPECT_GT(max_rel_err(prefill_in_slot(runner, want.ids, 1), want), 10 * kTol);
  }
}

TEST(LoraGguf, TheEngineLoadsThemByPathOnAGgufBase) {
  EngineConfig cfg = testing_support::stories_config();
  cfg.model.model = kGguf + "base-F32.gguf";
  cfg.model.skip_tokenizer_init = true;
  cfg.lora.enable_lora = true;
  cfg.lora.max_loras = 2;
  cfg.server.lora_modules = {"qv=" + kGguf + "qv_r4.gguf", "mlp=" + kGguf + "mlp_o_r2_bin.gguf"};
  Engine engine(cfg);
  std::vector<GenerateRequest> reqs;
  for (const auto& [name, dir] : std::vector<std::pair<std::string, std::string>>{{"qv", "qv_r4"},
                                                                                 {"mlp", "mlp_o_r2_bin"}}) {
    const Expected want = load_expected_from(kLora + dir);
    reqs.push_back(testing_support::reference_greedy_request(name, want.ids, name));
  }
  const testing_support::Outputs got = testing_support::run_requests(engine, reqs);
  EXPECT_EQ(got.at("qv"), load_expected_from(kLora + "qv_r4").greedy);
  EXPECT_EQ(got.at("mlp"), load_expected_from(kLora + "mlp_o_r2_bin").greedy);
}

// Phi-3's fused projections: llama.cpp's attn_qkv and ffn_up (gate and up stacked) become the
// model's stacked qkv_proj and gate_up_proj: the engine reads the PEFT adapter's weights out of the
// file, and the adapter gives the float64 merged reference and its greedy tokens through the engine.
TEST(LoraGguf, Phi3sFusedQkvAndGateUpMapToTheStackedWeights) {
  const std::string phi3 = std::string(CYPRIS_FIXTURES_DIR) + "/lora/phi3_fused_longrope/";
  EngineConfig cfg = testing_support::stories_config();
  cfg.model.model = kFixtures + "phi3_fused_longrope";
  cfg.model.skip_tokenizer_init = true;
  cfg.lora.enable_lora = true;
  cfg.lora.max_loras = 2;
  cfg.server.lora_modules = {"fused=" + phi3 + "gguf/fused_r4.gguf"};
  Engine engine(cfg);

  const LoraAdapter peft = load_lora_adapter(phi3 + "fused_r4", 16);
  const LoraAdapter gguf = engine.read_lora(phi3 + "gguf/fused_r4.gguf");
  EXPECT_EQ(gguf.gguf_arch, "phi3");
  EXPECT_FLOAT_EQ(gguf.scale, peft.scale);
  ASSERT_EQ(gguf.modules.size(), peft.modules.size());
  for (const auto& [module, m] : peft.modules) {
    ASSERT_TRUE(gguf.modules.count(module)) << module;  // model.layers.N.mlp.gate_up_proj, not up_proj
    const LoraModule& g = gguf.modules.at(module);
    EXPECT_EQ(g.b.shape, m.b.shape) << module;
    EXPECT_EQ(std::memcmp(g.a.buffer.data(), m.a.buffer.data(), m.a.buffer.size()), 0) << module << " A";
    EXPECT_EQ(std::memcmp(g.b.buffer.data(), m.b.buffer.data(), m.b.buffer.size()), 0) << module << " B";
  }

  const Expected want = load_expected_from(phi3 + "fused_r4");
  ModelRunner runner(lora_options(kFixtures + "phi3_fused_longrope"));
  runner.load_lora(1, engine.read_lora(phi3 + "gguf/fused_r4.gguf"));
  EXPECT_LT(max_rel_err(prefill_in_slot(runner, want.ids, 1), want), kTol);

  const GenerateRequest r = testing_support::reference_greedy_request("fused", want.ids, "fused");
  EXPECT_EQ(testing_support::run_requests(engine, {r}).at("fused"), want.greedy);
}

TEST(LoraGguf, FilesThatAreNoLoraAdapterAreRefusedNamingTheKey) {
  EXPECT_THAT([] { load_lora_adapter(kGguf + "base-F32.gguf", 16); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("base-F32.gguf"), HasSubstr("general.type"))));
  EXPECT_THAT([] { load_lora_adapter(kGguf + "qv_r4.gguf", 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--max-lora-rank 2")));
  LoraAdapter odd = gguf_adapter("qv_r4", false);
  EXPECT_THAT([&] { undo_gguf_qk_permutation(odd, 3, 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("model.layers.0.self_attn.q_proj")));
}

}  // namespace
}  // namespace cypris
