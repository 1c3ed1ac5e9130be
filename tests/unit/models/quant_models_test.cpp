// Whole GPTQ and AWQ models (tests/fixtures/quant: tiny Llamas packed as AutoGPTQ / AutoAWQ pack
// them) against the float64 forward of tests/tools/gen_quant_fixtures.py over the dequantized
// weights: full-prefill logits within the tolerance that Cypris's 8-bit activations allow, the
// reference's greedy continuation, and two CPU ranks giving the one-rank logits; the layers stay
// quantized in memory (act-order GPTQ layers over their columns sorted by group, the activations
// gathered in that order before each product: WeightSource::column_segments).
//
// Tolerance: each quantized product quantizes its activations per block b (the weight's block, 32
// or 128 values) to 8 bits, an error of at most max|x_b| / 254 per value (docs/quantization.md), and
// the errors of the products add up through the layer and the final norm. Measured on these
// fixtures: 1.0-1.9% of the largest logit (the 128-value blocks at the top). The GGUF model tests,
// whose activations are quantized the same way, hold logits to 5e-2; so do these. A broken
// dequantization is off by far more (a wrong AWQ column order or GPTQ zero offset: checked by hand,
// see docs/quantization.md). The greedy fixtures keep a top-1 lead of 5% of the largest logit (the
// generator checks), more than two logits can move against each other here.
//
// The MoE fixtures (*_mixtral, *_qwen2_moe: the Mixtral and Qwen2-MoE family fixtures with every
// expert packed the same way, written by tests/tools/gen_quant_moe_fixtures.py) keep their experts in
// W4 blocks through the grouped expert products (Backend::grouped_linear); their errors add up over
// three layers. The routing cannot move: the generator keeps every token's k-th router logit at least
// 0.1 above the next (expected.json min_router_gap). A shifted expert index is off by a whole expert.
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

class QuantModels : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantModels, FullPrefillMatchesTheFloat64Reference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  expect_prefill_within(runner, e, kTolerance, GetParam());
}

TEST_P(QuantModels, GreedyDecodeMatchesTheReference) {
  const Expected e = load(GetParam());
  ModelRunner runner(options(GetParam()));
  expect_reference_greedy(runner, e, GetParam());
}

// Two ranks: column-parallel layers split their rows, row-parallel ones their groups with the
// columns. Where each rank's share of a row is whole blocks (32-value blocks; 64-value blocks of the
// 128-column layers) every rank keeps its blocks quantized and quantizes its activations in the same
// blocks as one rank, so the logits agree to float summation order; the 128-value fixtures cannot
// split a 128-column layer's blocks over two ranks, nor the 64-value AWQ MoE experts their 64-column
// down projections (the loader then dequantizes those), so they are held to the reference's
// tolerance instead, as is act-order (below).
TEST_P(QuantModels, TwoCpuRanksGiveTheOneRankLogits) {
  const std::string name = GetParam();
  const Expected e = load(name);
  const auto [a, b] = one_and_two_rank_prefills(kQuantModels + name, e);
  ASSERT_EQ(a.rows, b.rows);
  // Act-order: a row-parallel rank sorts its own half of the columns by group, so its activation
  // blocks differ from one rank's (or it reads the layer dequantized): held to the reference.
  const bool splits = (name.find("g32") != std::string::npos ||
                       (name.find("g64") != std::string::npos && name.find("moe") == std::string::npos)) &&
                      name.find("act_order") == std::string::npos;
  for (int64_t r = 0; r < a.rows; ++r) {
    if (splits) {
      EXPECT_LT(rel_err(b.row(r), a.row(r), a.vocab), 1e-5) << name << " row " << r;
    } else {
      EXPECT_LT(rel_err(b.row(r), e.logits[r].data(), a.vocab), kTolerance) << name << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantModels,
                         ::testing::Values("gptq_w4_g128_v1", "gptq_w8_g32_sym_v2", "gptq_w2_rowgroup_v1",
                                           "gptq_w3_g32_v1", "gptq_w4_g64_act_order", "awq_w4_g128", "awq_w4_g64", "ct_w4a16_g128_sym",
                                           "ct_w8a16_channel_asym", "gptq_w4_g32_mixtral", "awq_w4_g64_qwen2_moe",
                                           "gptq_w4_g64_v1", "ct_w4a16_g64_asym", "gptq_w4_g128_sym_v1",
                                           "gptq_marlin_w4_g128"));

}  // namespace
}  // namespace cypris
