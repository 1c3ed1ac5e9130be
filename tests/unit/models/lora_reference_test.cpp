// LoRA adapters in the model runner against the float64 torch reference of
// tests/tools/gen_lora_fixtures.py (the base model with W + scale·B·A merged, PEFT's definitions):
// each adapter alone (separate q/k/v/o and gate/up/down, all-linear with rsLoRA, a .bin adapter,
// Phi-3's fused qkv_proj / gate_up_proj, Cohere's interleaved rotary rows, Qwen3 with q/k norms and
// sliding layers, Gemma 2 with its soft-capping and sliding layers) gives the reference
// logits and greedy tokens; one batch mixing three adapters and the base model gives each row its
// own output; tensor parallelism 2 gives the same; an adapter that does not fit the model is
// refused naming the module and the shapes; an emptied slot gives the base model again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/loader/lora_adapter.h"
#include "tests/support/lora_runs.h"
#include "tests/support/reference_fixture.h"
#include "tests/support/safetensors_edit.h"
#include "tests/support/temp_dir.h"

namespace cypris {
namespace {

using namespace reference_fixture;
using ::testing::HasSubstr;

const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/";
constexpr double kTol = 1e-4;  // fp32 CPU against the float64 reference, relative to the row's largest logit

struct Case {
  std::string base, adapter;
};
const std::vector<Case> kCases = {{"llama_gqa_tied", "qv_r4"},
                                  {"llama_gqa_tied", "all_r8_rslora"},
                                  {"llama_gqa_tied", "mlp_o_r2_bin"},
                                  {"phi3_fused_longrope", "fused_r4"},
                                  {"cohere_parallel_block", "qk_r4"},
                                  {"qwen3_qknorm_sliding", "all_r4"},
                                  {"gemma2_softcap_sliding", "qkv_down_r8"}};

ModelRunnerOptions lora_options(const std::string& base, int tp = 1) {
  ModelRunnerOptions o = fixture_options(kFixtures + base, "float32", 16, 16, tp);
  o.max_loras = 4;
  o.max_lora_rank = 16;
  return o;
}

LoraAdapter adapter(const Case& c) { return load_lora_adapter(kLora + c.base + "/" + c.adapter, 16); }

// Rows [row0, row0 + expected rows) of got against expected.
void expect_rows(const Logits& got, int64_t row0, const Expected& want, const std::string& what) {
  for (size_t t = 0; t < want.logits.size(); ++t) {
    EXPECT_LT(rel_err(got.row(row0 + static_cast<int64_t>(t)), want.logits[t]), kTol) << what << " position " << t;
  }
}

TEST(LoraReference, EachAdapterAloneMatchesTheMergedReference) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.base + "/" + c.adapter);
    ModelRunner runner(lora_options(c.base));
    runner.load_lora(2, adapter(c));  // not slot 0: the slot's offset into the stacked weights counts
    const Expected want = load_expected_from(kLora + c.base + "/" + c.adapter);
    const Expected base = load_expected(c.base);
    const Logits got = multi_prefill(runner, {want.ids, base.ids}, {2, -1});
    expect_rows(got, 0, want, "adapter");
    expect_rows(got, static_cast<int64_t>(want.ids.size()), base, "base row beside it");
    EXPECT_EQ(lora_greedy(runner, want.ids, 8, 2), want.greedy);
  }
}

TEST(LoraReference, OneBatchMixingThreeAdaptersAndTheBaseGivesEachRowItsOwnOutput) {
  for (int tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    ModelRunner runner(lora_options("llama_gqa_tied", tp));
    std::vector<std::vector<int32_t>> seqs;
    std::vector<int32_t> slots;
    std::vector<Expected> wants;
    int slot = 0;
    for (const Case& c : kCases) {
      if (c.base != "llama_gqa_tied") continue;
      runner.load_lora(slot, adapter(c));
      wants.push_back(load_expected_from(kLora + c.base + "/" + c.adapter));
      slots.push_back(slot++);
    }
    wants.push_back(load_expected("llama_gqa_tied"));
    slots.push_back(-1);
    // Interleaved so that neighbouring rows belong to different adapters.
    const std::vector<size_t> order = {3, 0, 2, 1};
    std::vector<int32_t> ordered_slots;
    for (size_t i : order) {
      seqs.push_back(wants[i].ids);
      ordered_slots.push_back(slots[i]);
    }
    const Logits got = multi_prefill(runner, seqs, ordered_slots);
    int64_t row = 0;
    for (size_t i : order) {
      expect_rows(got, row, wants[i], "sequence with slot " + std::to_string(slots[i]));
      row += static_cast<int64_t>(wants[i].ids.size());
    }
  }
}

// With an fp8 (e4m3) KV cache an adapter gives what the model with the adapter merged into its
// weights (W + scale·B·A, written here as a checkpoint) gives with the same cache: the adapter is
// applied in the projections before the cache write, so both caches hold the same values up to fp32
// reordering (1e-6 relative), far from fp8's steps (2^-4); the logits agree within fp32's 1e-5. (Against
// the float64 reference the fp8 rounding itself dominates: 0.04 to 0.4 of the row's largest logit.)
TEST(LoraReference, AnFp8KvCacheGivesTheMergedModelsOutput) {
  for (const Case& c : {kCases[0], kCases[1], kCases[2]}) {
    SCOPED_TRACE(c.adapter);
    test::TempDir dir("lora_fp8");
    auto tensors = testing_support::copy_checkpoint(kFixtures + c.base, dir.path());
    const LoraAdapter a = adapter(c);
    for (const auto& [module, m] : a.modules) {
      testing_support::RawTensor& w = tensors.at(module + ".weight");
      ASSERT_EQ(w.dtype, "F32");
      float* wd = reinterpret_cast<float*>(w.bytes.data());
      const float* ad = reinterpret_cast<const float*>(m.a.buffer.data());
      const float* bd = reinterpret_cast<const float*>(m.b.buffer.data());
      const int64_t out = m.b.shape[0], in = m.a.shape[1], r = m.a.shape[0];
      for (int64_t i = 0; i < out; ++i)
        for (int64_t j = 0; j < in; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < r; ++k) acc += static_cast<double>(bd[i * r + k]) * ad[k * in + j];
          wd[i * in + j] = static_cast<float>(wd[i * in + j] + a.scale * acc);
        }
    }
    testing_support::write_tensors(dir.path() / "model.safetensors", tensors);
    ModelRunnerOptions lo = lora_options(c.base);
    lo.kv_cache_dtype = DType::F8E4M3;
    ModelRunner with_adapter(lo);
    with_adapter.load_lora(1, adapter(c));
    ModelRunnerOptions mo = fixture_options(dir.path().string(), "float32", 16, 16);
    mo.kv_cache_dtype = DType::F8E4M3;
    mo.max_loras = 1;  // its rows name no slot (-1): the base path of the same code
    ModelRunner merged(mo);
    const Expected want = load_expected_from(kLora + c.base + "/" + c.adapter);
    const Logits got = multi_prefill(with_adapter, {want.ids}, {1});
    const Logits ref = multi_prefill(merged, {want.ids}, {-1});
    expect_same_logits(got, ref, "adapter vs merged, fp8 cache");
    EXPECT_EQ(lora_greedy(with_adapter, want.ids, 8, 1), lora_greedy(merged, want.ids, 8, -1));
  }
}

TEST(LoraReference, AnEmptiedSlotGivesTheBaseModelAgain) {
  const Case c = kCases[1];
  ModelRunner runner(lora_options(c.base));
  runner.load_lora(0, adapter(c));
  runner.clear_lora(0);
  const Expected base = load_expected(c.base);
  expect_rows(multi_prefill(runner, {base.ids}, {0}), 0, base, "cleared slot");
  // A batch that names no slot at all (no request uses an adapter) runs the base model.
  runner.load_lora(1, adapter(c));
  expect_rows(full_prefill(runner, base.ids), 0, base, "batch without slots");
  // A smaller adapter written over a larger one leaves nothing of the first behind.
  runner.load_lora(0, adapter(kCases[1]));
  runner.load_lora(0, adapter(kCases[0]));
  expect_rows(multi_prefill(runner, {base.ids}, {0}), 0, load_expected_from(kLora + c.base + "/qv_r4"), "overwritten");
}

TEST(LoraReference, AdaptersThatDoNotFitAreRefusedNamingModuleAndShapes) {
  ModelRunner runner(lora_options("llama_gqa_tied"));
  // A Phi-3 adapter names fused modules the Llama model does not have.
  EXPECT_THAT([&] { runner.load_lora(0, adapter(kCases[3])); },
              ::testing::ThrowsMessage<Error>(HasSubstr("model.layers.0.mlp.gate_up_proj")));
  LoraAdapter a = adapter(kCases[0]);
  LoraModule& m = a.modules.at("model.layers.1.self_attn.v_proj");
  m.b.shape = {15, 4};  // v_proj is [16, 32]
  EXPECT_THAT([&] { runner.check_lora(a); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("model.layers.1.self_attn.v_proj"), HasSubstr("[15, 4]"),
                                                    HasSubstr("[16, 32]"))));
  LoraAdapter expert = adapter(kCases[0]);
  expert.modules.emplace("model.layers.0.mlp.experts.0.w1", std::move(expert.modules.begin()->second));
  EXPECT_THAT([&] { runner.check_lora(expert); },
              ::testing::ThrowsMessage<Error>(HasSubstr("model.layers.0.mlp.experts.0.w1")));
  EXPECT_THAT([&] { runner.load_lora(4, adapter(kCases[0])); }, ::testing::ThrowsMessage<Error>(HasSubstr("slot 4")));
}

TEST(LoraReference, BatchSlotsAreCheckedBeforeTheKernelsReadThem) {
  ModelRunner runner(lora_options("llama_gqa_tied"));
  BatchContext b = make_single_sequence_batch(std::vector<int32_t>{1, 2, 3}, 0, runner.block_size());
  b.lora_slots = {0, 4, 0};
  EXPECT_THAT([&] { runner.execute(b); }, ::testing::ThrowsMessage<Error>(HasSubstr("--max-loras 4")));
  b.lora_slots = {0};
  EXPECT_THAT([&] { runner.execute(b); }, ::testing::ThrowsMessage<Error>(HasSubstr("lora_slots")));
  ModelRunner plain(fixture_options(kFixtures + "llama_gqa_tied"));
  b.lora_slots = {0, 0, 0};
  EXPECT_THAT([&] { plain.execute(b); }, ::testing::ThrowsMessage<Error>(HasSubstr("--enable-lora")));
}

}  // namespace
}  // namespace cypris
