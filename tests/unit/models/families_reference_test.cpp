// The model families beyond Llama (Qwen3, Qwen3-MoE and Mixtral with top-2-of-8 experts, Qwen2-MoE
// with its sigmoid-gated shared expert, Gemma 2,
// Gemma 3 and Gemma 3's text part inside a multimodal checkpoint, Phi-3 with fused projections and
// longrope scaling past its original length) against the independent float64 torch reference of
// tests/tools/gen_family_fixtures.py: tiny random configs with every feature of the family on.
// Full-prefill logits within 1e-4, the reference's greedy continuation token by token through
// the paged cache, and tensor parallelism over 2 CPU ranks equal to one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/runtime/model_runner.h"
#include "models/layers/moe.h"
#include "models/registry/registry.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

using namespace reference_fixture;

ModelRunnerOptions options(const std::string& name, int tp = 1, int block_size = 4) {
  return fixture_options(kFixtures + name, "float32", block_size, 16, tp);
}

class Families : public ::testing::TestWithParam<std::string> {};

TEST_P(Families, FullPrefillMatchesTorchReference) {
  const std::string name = GetParam();
  const Expected e = load_expected(name);
  ModelRunner runner(options(name));
  const Logits l = full_prefill(runner, e.ids);
  ASSERT_EQ(l.rows, static_cast<int64_t>(e.ids.size()));
  for (int64_t r = 0; r < l.rows; ++r) {
    EXPECT_LT(rel_err(l.row(r), e.logits[r].data(), l.vocab), 1e-4) << name << " row " << r;
  }
}

// Prefill 12 tokens, then decode one token at a time through the paged cache (blocks of 4, so
// the sliding windows cross block boundaries): the reference's greedy tokens.
TEST_P(Families, GreedyDecodeMatchesTorchReference) {
  const std::string name = GetParam();
  const Expected e = load_expected(name);
  ASSERT_FALSE(e.greedy.empty()) << name << ": the fixture has no greedy continuation";
  ModelRunner runner(options(name));
  const std::vector<int32_t> got =
      greedy_decode(runner, std::vector<int32_t>(e.ids.begin(), e.ids.begin() + 12), e.greedy.size());
  EXPECT_EQ(got, e.greedy) << name;
}

TEST_P(Families, TwoCpuRanksGiveTheOneRankLogits) {
  const std::string name = GetParam();
  const Expected e = load_expected(name);
  ModelRunner one(options(name));
  ModelRunner two(options(name, 2));
  ASSERT_EQ(two.tensor_parallel_size(), 2);
  const Logits a = full_prefill(one, e.ids);
  const Logits b = full_prefill(two, e.ids);
  ASSERT_EQ(a.rows, b.rows);
  for (int64_t r = 0; r < a.rows; ++r) EXPECT_LT(rel_err(b.row(r), a.row(r), a.vocab), 1e-5) << name << " row " << r;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Families,
                         ::testing::Values("qwen3_qknorm_sliding", "qwen3_moe_top2_of_8", "mixtral_top2_of_8",
                                           "qwen2_moe_shared_expert",
                                           "phi3_fused_longrope", "cohere_parallel_block", "cohere2_sliding_nope",
                                           "cohere_plus_qk_norm",
                                           "gemma2_softcap_sliding", "gemma3_local_global", "gemma3_multimodal_text"));

TEST(Registry, ListsTheFamilies) {
  const auto archs = supported_architectures();
  for (const char* a : {"LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM",
                        "MixtralForCausalLM",
                        "Phi3ForCausalLM", "CohereForCausalLM", "Cohere2ForCausalLM", "Gemma2ForCausalLM",
                        "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}) {
    EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << a;
  }
}

// Each family's GGUF rows come back to it: a file of that architecture gets a config whose
// architecture is the family's own (so its config fields are read), every GGUF name is read by one
// family only, and a family's registry rows are consecutive (the GGUF error lists each family once).
TEST(Registry, FamiliesOwnTheirGgufArchitectures) {
  const ModelFamilies& rows = model_families();
  std::vector<std::string> gguf_names;
  std::vector<const ModelFamily*> seen;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ModelFamily* f = rows[i].family;
    ASSERT_NE(f, nullptr) << rows[i].architecture;
    if (i > 0 && rows[i - 1].family == f) continue;
    EXPECT_EQ(std::find(seen.begin(), seen.end(), f), seen.end()) << f->name << "'s rows are not consecutive";
    seen.push_back(f);
    for (const GgufArchitecture& g : f->gguf) {
      EXPECT_EQ(std::find(gguf_names.begin(), gguf_names.end(), g.gguf_arch), gguf_names.end()) << g.gguf_arch;
      gguf_names.emplace_back(g.gguf_arch);
      EXPECT_EQ(find_family(rows, {std::string(g.hf_architecture)}), f) << g.gguf_arch << " -> " << g.hf_architecture;
      EXPECT_EQ(find_gguf_architecture(rows, g.gguf_arch), &g);
    }
  }
  EXPECT_EQ(find_family(rows, {"FalconForCausalLM"}), nullptr);
  EXPECT_EQ(find_gguf_architecture(rows, "falcon"), nullptr);
}

// Routing: softmax, top-k (lower id first on ties), optional renormalisation.
TEST(MoeRouting, TopKOfSoftmaxRenormalisedOrNot) {
  const std::vector<float> logits = {0.0f, 2.0f,  1.0f, 2.0f,   // tie between experts 1 and 3
                                     5.0f, -1.0f, 0.0f, 4.0f};  // experts 0 and 3
  const ExpertRouting r = route_top_k(logits, 2, 4, 2, true);
  EXPECT_EQ(r.tokens[1], std::vector<int32_t>({0}));
  EXPECT_EQ(r.tokens[3], std::vector<int32_t>({0, 1}));
  EXPECT_EQ(r.tokens[0], std::vector<int32_t>({1}));
  EXPECT_TRUE(r.tokens[2].empty());
  EXPECT_NEAR(r.weights[1][0], 0.5, 1e-6);
  EXPECT_NEAR(r.weights[0][0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  const ExpertRouting raw = route_top_k(logits, 2, 4, 2, false);
  const double z = 1 + 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(raw.weights[1][0], std::exp(2.0) / z, 1e-6);
  EXPECT_THROW(route_top_k(logits, 2, 4, 5, true), Error);
}

TEST(Registry, UnsupportedArchitectureNamesItAndListsTheFamilies) {
  ModelConfig cfg = parse_model_config(model_families(), R"({"architectures":["FalconForCausalLM"],"hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,
          "num_attention_heads":4,"vocab_size":16})",
      "/m/config.json");
  try {
    resolve_architecture(cfg);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("FalconForCausalLM"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Gemma3ForCausalLM"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Qwen3MoeForCausalLM"), std::string::npos) << msg;
  }
}

TEST(FamilyConfigs, BadMoeAndGemmaFieldsAreNamed) {
  const std::string base =
      R"("hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":16)";
  auto error_of = [&](const std::string& json) {
    try {
      parse_model_config(model_families(), json, "/m/config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(
      error_of(R"({"architectures":["Qwen3MoeForCausalLM"],"num_experts":8,"num_experts_per_tok":9,)" + base + "}")
          .find("num_experts_per_tok"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"architectures":["Qwen3MoeForCausalLM"],"num_experts":8,"num_experts_per_tok":2,)"
                     R"("mlp_only_layers":[5],)" +
                     base + "}")
                .find("mlp_only_layers"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"architectures":["Gemma2ForCausalLM"],"model_type":"gemma2","final_logit_softcapping":-1,)" +
                     base + "}")
                .find("softcapping"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"architectures":["X"],"hidden_act":"relu",)" + base + "}").find("relu"), std::string::npos);
  // Gemma 3: every sliding_window_pattern-th layer is global; Gemma 2: the odd layers are.
  const ModelConfig g3 = parse_model_config(model_families(), R"({"architectures":["Gemma3ForCausalLM"],"model_type":"gemma3_text","sliding_window":8,"sliding_window_pattern":2,)" +
          base + "}",
      "/m/config.json");
  EXPECT_EQ(g3.layer_sliding_window, std::vector<int>({8, 0}));
  EXPECT_TRUE(g3.tie_word_embeddings);
  EXPECT_EQ(g3.hidden_act, "silu");  // no hidden_activation given
}

}  // namespace
}  // namespace cypris
