// Whole bitsandbytes 4-bit and int8 models (tests/fixtures/quant/bnb_*: tiny Llamas saved as transformers saves
// bitsandbytes' Params4bit) against the float64 forward of tests/tools/gen_bnb_fixtures.py over the
// dequantized weights: prefill logits, the greedy continuation, two CPU ranks.
//
// Tolerance: the weights stay in 4 bits and decode exactly (table value * absmax in fp32, checked
// bit for bit by the loader tests), and the CPU multiplies them with fp32 activations (not
// quantized), so the only differences from the float64 forward are fp32 roundings: about 2^-24
// relative per operation, growing with the square root of the ≤256-term sums and through one layer,
// the final norm and lm_head — of the order of 1e-6 of the largest logit. 1e-4 leaves a hundredfold
// margin and is far below what a wrong layout does (checked by hand: reading the two codes of a byte
// in the other order puts the logits 164-194% of the largest logit off, dropping the nested absmax
// offset 129%; both also fail the loader's bit-for-bit tests and the greedy tokens).
#include <gtest/gtest.h>

#include "engine/runtime/model_runner.h"
#include "tests/support/quant_model_checks.h"

namespace cypris {
namespace {

using namespace reference_fixture;

constexpr double kTolerance = 1e-4;

ModelRunnerOptions options(const std::string& name) {
  return quant_model_options(kQuantModels + name);
}
Expected load(const std::string& name) {
  return load_expected_from(kQuantModels + name);
}

class BnbModels : public ::testing::TestWithParam<std::string> {};

TEST_P(BnbModels, FullPrefillMatchesTheFloat64Reference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  expect_prefill_within(runner, e, kTolerance, GetParam());
}

TEST_P(BnbModels, GreedyDecodeMatchesTheReference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  expect_reference_greedy(runner, e, GetParam());
}

// Two ranks: every 4-bit layer splits on whole 64-value blocks (rows, or 64/128 columns per rank), so
// the ranks keep 4-bit blocks (int8 layers: the dequantized values); with fp32 activations the logits
// agree with one rank to float summation order.
TEST_P(BnbModels, TwoCpuRanksGiveTheOneRankLogits) {
  const Expected e = load(GetParam());
  const auto [a, b] = one_and_two_rank_prefills(kQuantModels + GetParam(), e);
  ASSERT_EQ(a.rows, b.rows);
  for (int64_t r = 0; r < a.rows; ++r) EXPECT_LT(rel_err(b.row(r), a.row(r), a.vocab), 1e-5) << "row " << r;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BnbModels,
                         ::testing::Values("bnb_nf4", "bnb_nf4_double_quant", "bnb_fp4_block128", "bnb_int8"));

}  // namespace
}  // namespace cypris
