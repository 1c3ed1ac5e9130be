// Whole FP8 models (tests/fixtures/quant/fp8_*, ct_fp8_*: tiny Llamas in vLLM's Fp8Config layout and
// compressed-tensors float-quantized) against the float64 forward of tests/tools/gen_quant_fixtures.py
// over the dequantized weights: prefill logits, the greedy continuation, two CPU ranks.
//
// Tolerance: the weights stay in FP8 and decode exactly (fp8 * scale in fp32, checked bit for bit by
// the loader tests), and the CPU multiplies them with fp32 activations (not quantized), so the only
// differences from the float64 forward are fp32 roundings: about 2^-24 relative per operation,
// growing with the square root of the ≤256-term sums and through one layer, the final norm and
// lm_head — of the order of 1e-6 of the largest logit (measured 1e-6). 1e-4 leaves a hundredfold
// margin and is far below what a wrong scale does (checked by hand: reading each layer's first
// scale instead of its block's or row's puts the 128x128-block fixture 12% and the per-channel one
// 119% of the largest logit off).
//
// The bitsandbytes fixtures (tests/fixtures/quant/bnb_*: tiny Llamas saved as transformers saves
// bitsandbytes' Params4bit, from tests/tools/gen_bnb_fixtures.py) run here too: their 4-bit codes
// decode exactly (table value * absmax in fp32) and multiply fp32 activations, so the same bound
// holds; every 4-bit layer splits on whole 64-value blocks, so two ranks agree to summation order.
// A wrong layout is far off (the two codes of a byte read in the other order: 164-194% of the
// largest logit; the nested absmax offset dropped: 129%). bitsandbytes int8 (bnb_int8) layers are kept
// in W8 blocks like the W8A8 ones: their activations are quantized to 8 bits per 128 values, and the
// row scale SCB / 127 is rounded to fp16 (each weight within 2^-11 * SCB of bitsandbytes' value), so
// they take the W8A8 tolerance.
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

// The fixtures whose layers are W8 blocks, multiplied with 8-bit activations.
bool int8_activations(const std::string& name) {
  return name.find("w8a8") != std::string::npos || name.find("int8") != std::string::npos;
}

class Fp8Models : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Models, FullPrefillMatchesTheFloat64Reference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  // int8 (W8A8) layers: 8-bit activations per 128 values, as the online int8 layers (see
  // online_quant_models_test.cpp for the tolerance); FP8: fp32 activations.
  const double tol = int8_activations(GetParam()) ? 8e-2 : kTolerance;
  expect_prefill_within(runner, e, tol, GetParam());
}

TEST_P(Fp8Models, GreedyDecodeMatchesTheReference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  expect_reference_greedy(runner, e, GetParam());
}

// Two ranks: FP8 layers split on whole 128-value blocks stay FP8, the others (o_proj's 64 columns
// per rank) are read dequantized, which with fp32 activations gives the same products: the logits
// agree with one rank to float summation order.
TEST_P(Fp8Models, TwoCpuRanksGiveTheOneRankLogits) {
  const Expected e = load(GetParam());
  const auto [a, b] = one_and_two_rank_prefills(kQuantModels + GetParam(), e);
  ASSERT_EQ(a.rows, b.rows);
  // int8 layers whose 128-column blocks do not split (o_proj over two ranks) are read dequantized on
  // the ranks: held to the reference's tolerance instead, as the 128-block GPTQ fixtures.
  const bool int8 = int8_activations(GetParam());
  for (int64_t r = 0; r < a.rows; ++r) {
    if (int8) {
      EXPECT_LT(rel_err(b.row(r), e.logits[r].data(), a.vocab), 8e-2) << "row " << r;
    } else {
      EXPECT_LT(rel_err(b.row(r), a.row(r), a.vocab), 1e-5) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Models,
                         ::testing::Values("fp8_tensor_static", "fp8_block128_dynamic", "ct_fp8_channel_dynamic",
                                           "ct_fp8_tensor_static", "ct_w8a8_channel_dynamic",
                                           "ct_w8a8_tensor_static_asym", "bnb_nf4", "bnb_nf4_double_quant",
                                           "bnb_fp4_block128", "bnb_int8"));

}  // namespace
}  // namespace cypris
