// LoRA adapters over quantized bases against the float64 reference of
// tests/tools/gen_lora_quant_fixtures.py: the base's dequantized weights with the adapter merged
// (W + scale·B·A). Bases: the Llama fixture as GGUF Q8_0 and Q4_0 files (attention and gate/up
// projections quantized) and the 4-bit GPTQ fixture. The adapter runs in floating point beside the
// quantized product, so the only difference from the reference is what the base itself does to its
// activations: each adapter alone stays within the base's own bound and gives the reference's greedy
// tokens; one batch mixing two adapters and the base gives every row what it gets alone.
//
// Bounds (relative to each row's largest logit): Q4_0 and GPTQ products quantize their activations to
// 8 bits per block (at most max|x_b| / 254 per value), which the GPTQ model tests hold to 5e-2
// (quant_models_test.cpp; measured here 1.5-2.0%); Q8_0 products take 16-bit activations
// (kernels/cpu/quant/q8_0_acts16.h), 2e-3 (measured 6e-5 to 3.3e-4). The generator picks prompts
// whose greedy continuation leads by at least twice the bound at every step, so greedy tokens
// compare. The adapters move the logits by 0.5 to 1.7 of the largest logit (the generator prints
// it), so an adapter dropped, unscaled or with A and B swapped is far outside (checked below: the
// base's rows are not the adapter's).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/loader/lora_adapter.h"
#include "tests/support/lora_runs.h"
#include "tests/support/reference_fixture.h"

namespace cypris {
namespace {

using namespace reference_fixture;

const std::string kLora = std::string(CYPRIS_FIXTURES_DIR) + "/lora/";
const std::string kQuant = std::string(CYPRIS_FIXTURES_DIR) + "/quant/";

struct Base {
  std::string name;
  std::string model;                  // folder or .gguf file
  std::string base_expected;          // the dequantized base's reference
  std::vector<std::string> adapters;  // PEFT folders
  std::vector<std::string> expected;  // the merged references, one per adapter
  double tol;
};

std::vector<Base> bases() {
  const std::string gq = kLora + "llama_gqa_tied/quant/";
  std::vector<Base> out;
  for (const auto& [type, tol] : {std::pair<std::string, double>{"Q8_0", 2e-3}, {"Q4_0", 5e-2}}) {
    out.push_back({"GGUF " + type,
                   gq + "base-" + type + ".gguf",
                   gq + type + "/base",
                   {kLora + "llama_gqa_tied/qv_r4", kLora + "llama_gqa_tied/all_r8_rslora"},
                   {gq + type + "/qv_r4", gq + type + "/all_r8_rslora"},
                   tol});
  }
  const std::string g = kLora + "gptq_w4_g128_v1/";
  out.push_back({"GPTQ W4",
                 kQuant + "gptq_w4_g128_v1",
                 kQuant + "gptq_w4_g128_v1",
                 {g + "qv_r4", g + "all_r8"},
                 {g + "qv_r4", g + "all_r8"},
                 5e-2});
  return out;
}

ModelRunnerOptions options(const std::string& model) {
  ModelRunnerOptions o = fixture_options(model, "float32", 16, 16);
  o.max_loras = 2;
  o.max_lora_rank = 16;
  return o;
}

double worst_rows(const Logits& got, int64_t row0, const Expected& want) {
  double worst = 0;
  for (size_t t = 0; t < want.logits.size(); ++t) {
    worst = std::max(worst, rel_err(got.row(row0 + static_cast<int64_t>(t)), want.logits[t]));
  }
  return worst;
}

TEST(LoraQuantBase, EachAdapterAloneStaysWithinTheBasesOwnBoundAndGreedyEqual) {
  for (const Base& b : bases()) {
    SCOPED_TRACE(b.name);
    ModelRunner runner(options(b.model));
    const Expected base = load_expected_from(b.base_expected);
    for (size_t i = 0; i < b.adapters.size(); ++i) {
      SCOPED_TRACE(b.adapters[i]);
      const int32_t slot = static_cast<int32_t>(i);
      runner.load_lora(slot, load_lora_adapter(b.adapters[i], 16));
      const Expected want = load_expected_from(b.expected[i]);
      const Logits got = multi_prefill(runner, {want.ids, base.ids}, {slot, -1});
      const double err = worst_rows(got, 0, want);
      EXPECT_LT(err, b.tol);
      ::testing::Test::RecordProperty(b.name + " " + std::to_string(i) + " max_rel_err", std::to_string(err));
      const int64_t base_row0 = static_cast<int64_t>(want.ids.size());
      EXPECT_LT(worst_rows(got, base_row0, base), b.tol) << "the base's rows beside it";
      // The adapter matters far beyond the bound: the base's rows are not the adapter's reference.
      EXPECT_GT(worst_rows(got, base_row0, want), 4 * b.tol);
      EXPECT_EQ(lora_greedy(runner, want.ids, static_cast<int>(want.greedy.size()), slot), want.greedy);
    }
  }
}

TEST(LoraQuantBase, ABatchMixingAdaptersAndTheBaseGivesEachRowItsSoloOutput) {
  for (const Base& b : bases()) {
    SCOPED_TRACE(b.name);
    ModelRunner runner(options(b.model));
    runner.load_lora(0, load_lora_adapter(b.adapters[0], 16));
    runner.load_lora(1, load_lora_adapter(b.adapters[1], 16));
    const std::vector<int32_t> ids = load_expected_from(b.base_expected).ids;
    std::vector<int32_t> shorter(ids.begin(), ids.begin() + 11);
    // Interleaved: the base, adapter 1, adapter 0, adapter 1 on another prompt.
    const std::vector<std::vector<int32_t>> seqs = {ids, ids, ids, shorter};
    const std::vector<int32_t> slots = {-1, 1, 0, 1};
    const Logits batch = multi_prefill(runner, seqs, slots);
    int64_t row = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const Logits solo = multi_prefill(runner, {seqs[s]}, {slots[s]});
      for (int64_t t = 0; t < solo.rows; ++t) {
        // Each row's activations are quantized on their own, so the batch changes nothing but fp32 order.
        EXPECT_LT(rel_err(batch.row(row + t), solo.row(t), batch.vocab), 1e-5) << "sequence " << s << " row " << t;
      }
      row += solo.rows;
    }
    EXPECT_EQ(row, batch.rows);
  }
}

}  // namespace
}  // namespace cypris
