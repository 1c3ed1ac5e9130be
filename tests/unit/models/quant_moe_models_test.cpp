// Quantized MoE models (tests/fixtures/quant/*_mixtral, *_qwen2_moe: the Mixtral and Qwen2-MoE
// family fixtures with every expert packed as AutoGPTQ / AutoAWQ pack them, written by
// tests/tools/gen_quant_moe_fixtures.py) against the float64 forward of the family reference over
// the dequantized weights: full-prefill logits, the reference's greedy continuation, and two CPU
// ranks giving the one-rank logits. The experts stay in their W4 blocks and go through the grouped
// expert products (Backend::grouped_linear).
//
// Tolerance: as tests/unit/models/quant_models_test.cpp. Each quantized product quantizes its
// activations to 8 bits per 32-value block, at most max|x_b| / 254 per value; the errors add up
// through the layers (three here) and the final norm. The routing cannot move: the generator keeps
// every token's k-th router logit at least 0.1 above the next one (expected.json min_router_gap),
// far more than the router's fp32 product over those activations moves. Measured: see the test's
// max_rel_err property. A wrong expert (a shifted expert index) is off by the whole expert's output.
#include <gtest/gtest.h>

#include "engine/runtime/model_runner.h"
#include "tests/support/quant_model_checks.h"

namespace cypris {
namespace {

using namespace reference_fixture;

constexpr double kTolerance = 5e-2;

ModelRunnerOptions options(const std::string& name) {
  return quant_model_options(kQuantModels + name);
}
Expected load(const std::string& name) {
  return load_expected_from(kQuantModels + name);
}

class QuantMoeModels : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantMoeModels, FullPrefillMatchesTheFloat64Reference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  expect_prefill_within(runner, e, kTolerance, GetParam());
}

TEST_P(QuantMoeModels, GreedyDecodeMatchesTheReference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  expect_reference_greedy(runner, e, GetParam());
}

// Two ranks: each expert's w1/w3 split their rows, w2 its columns with their groups (32-value
// blocks: every rank keeps its blocks quantized and quantizes its activations in the same blocks),
// so the logits agree to float summation order.
TEST_P(QuantMoeModels, TwoCpuRanksGiveTheOneRankLogits) {
  const Expected e = load(GetParam());
  const auto [a, b] = one_and_two_rank_prefills(kQuantModels + GetParam(), e);
  ASSERT_EQ(a.rows, b.rows);
  for (int64_t r = 0; r < a.rows; ++r) EXPECT_LT(rel_err(b.row(r), a.row(r), a.vocab), 1e-5) << " row " << r;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantMoeModels, ::testing::Values("gptq_w4_g32_mixtral", "awq_w4_g64_qwen2_moe"));

}  // namespace
}  // namespace cypris
