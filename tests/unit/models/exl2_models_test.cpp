// A whole EXL2 model (tests/fixtures/quant/exl2_mixed: a two-layer tiny Llama packed as exllamav2's
// converter packs it, 2- to 8-bit groups, act-order permutations, lm_head at 6 bits) against the
// float64 forward of tests/tools/gen_exl2_fixtures.py over the dequantized weights: prefill logits,
// the greedy continuation, and two CPU ranks giving the one-rank logits.
//
// Tolerance: the layers are dequantized exactly (fp32, --dtype float32) and the activations stay
// fp32, so only fp32 rounding separates Cypris from the float64 forward: each dot product of 128
// terms is within about 128 * 2^-24 (8e-6) of its sum of magnitudes, through two layers, norms and
// softmax; 1e-4 of the largest logit leaves room for that and nothing else (measured: see the
// test's max_rel_err property). A layer read without its permutation, or with the scale rule off
// by one code, is off by 30% or more (checked by hand, docs/quantization.md "EXL2").
#include <gtest/gtest.h>

#include "engine/runtime/model_runner.h"
#include "tests/support/quant_model_checks.h"

namespace cypris {
namespace {

using namespace reference_fixture;

constexpr double kTolerance = 1e-4;
const std::string kExl2 = kQuantModels + "exl2_mixed";

TEST(Exl2Model, FullPrefillMatchesTheFloat64Reference) {
  const Expected e = load_expected_from(kExl2);
  ModelRunner runner(quant_model_options(kExl2));
  expect_prefill_within(runner, e, kTolerance, "exl2_mixed");
}

TEST(Exl2Model, GreedyDecodeMatchesTheReference) {
  const Expected e = load_expected_from(kExl2);
  ModelRunner runner(quant_model_options(kExl2));
  expect_reference_greedy(runner, e, "exl2_mixed");
}

// --dtype float16 (what auto picks for this float16 checkpoint): each dequantized weight is rounded
// once to fp16, a relative error of at most 2^-11 (5e-4) per weight, so each product is within
// 5e-4 of its sum of magnitudes; through two layers and the norms the logits stay within 1e-2 of the
// largest (20x that per-product bound; measured: the max_rel_err property). A layer read without
// its permutation is 191% off.
TEST(Exl2Model, Float16WeightsStayCloseToTheReference) {
  const Expected e = load_expected_from(kExl2);
  ModelRunner runner(fixture_options(kExl2, "float16", 4, 16));
  expect_prefill_within(runner, e, 1e-2, "exl2_mixed at float16");
  EXPECT_EQ(greedy_after_prompt(runner, e), e.greedy);
}

// Column-parallel layers take their output rows, row-parallel ones their input columns in the
// model's order (the permutation is undone while loading, so any split of the inputs works).
TEST(Exl2Model, TwoCpuRanksGiveTheOneRankLogits) {
  const Expected e = load_expected_from(kExl2);
  const auto [a, b] = one_and_two_rank_prefills(kExl2, e);
  ASSERT_EQ(a.rows, b.rows);
  for (int64_t r = 0; r < a.rows; ++r) EXPECT_LT(rel_err(b.row(r), a.row(r), a.vocab), 1e-5) << "row " << r;
}

}  // namespace
}  // namespace cypris
