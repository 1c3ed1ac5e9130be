// The set-up the whole-model tests of quantized checkpoints share (tests/fixtures/quant/*: GPTQ,
// AWQ, compressed-tensors, FP8, bitsandbytes, EXL2, quantized MoE, each with the float64 forward of
// its generator in expected.json): runner options, the worst prefill row against the reference,
// the greedy continuation of the fixture's prompt, and one- and two-rank prefills.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/model_runner.h"
#include "tests/support/reference_fixture.h"

namespace cypris::reference_fixture {

inline const std::string kQuantModels = std::string(CYPRIS_FIXTURES_DIR) + "/quant/";

// A CPU runner for the quantized fixture at path: float32, blocks of 4 tokens (so the decode
// crosses block boundaries), 16 blocks, tp ranks.
inline ModelRunnerOptions quant_model_options(const std::string& path, int tp = 1) {
  return fixture_options(path, "float32", 4, 16, tp);
}

// The largest relative row error of a full prefill of the fixture's ids against its reference
// logits; a prefill with the wrong number of rows fails the test (and gives infinity).
inline double worst_prefill_rel_err(ModelRunner& runner, const Expected& e) {
  const Logits l = full_prefill(runner, e.ids);
  EXPECT_EQ(l.rows, static_cast<int64_t>(e.ids.size()));
  if (l.rows != static_cast<int64_t>(e.ids.size())) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (int64_t r = 0; r < l.rows; ++r) worst = std::max(worst, rel_err(l.row(r), e.logits[r].data(), l.vocab));
  return worst;
}

// The greedy continuation (as long as the reference's) of the fixture's first 12 ids.
inline std::vector<int32_t> greedy_after_prompt(ModelRunner& runner, const Expected& e) {
  return greedy_decode(runner, std::vector<int32_t>(e.ids.begin(), e.ids.begin() + 12), e.greedy.size());
}

// A full prefill stays within tol (relative to the largest logit of each row) of the reference; the
// worst row goes into the test's max_rel_err property.
inline void expect_prefill_within(ModelRunner& runner, const Expected& e, double tol, const std::string& what) {
  const double worst = worst_prefill_rel_err(runner, e);
  EXPECT_LT(worst, tol) << what;
  ::testing::Test::RecordProperty("max_rel_err", std::to_string(worst));
}

// The runner continues the fixture's prompt with the reference's greedy tokens.
inline void expect_reference_greedy(ModelRunner& runner, const Expected& e, const std::string& what) {
  ASSERT_FALSE(e.greedy.empty()) << what << ": the fixture has no greedy continuation";
  EXPECT_EQ(greedy_after_prompt(runner, e), e.greedy) << what;
}

// Full prefills of the fixture's ids on one CPU rank and on two (first, second).
inline std::pair<Logits, Logits> one_and_two_rank_prefills(const std::string& path, const Expected& e) {
  ModelRunner one(quant_model_options(path));
  ModelRunner two(quant_model_options(path, 2));
  EXPECT_EQ(two.tensor_parallel_size(), 2);
  return {full_prefill(one, e.ids), full_prefill(two, e.ids)};
}

}  // namespace cypris::reference_fixture
