// Typical acceptance against a direct implementation of vLLM's rule in the test: keep a draft token x
// when p(x) > min(threshold, alpha * exp(H)), with H = sum_y p(y) log(p(y) + 1e-5) (the negative
// entropy); the rejected position emits the target's argmax.
#include "engine/spec/typical_acceptance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/common/error.h"

namespace cypris {
namespace {

bool reference_accept(const std::vector<double>& p, int token, double threshold, double alpha) {
  double neg_entropy = 0.0;
  for (double x : p) neg_entropy += x * std::log(x + 1e-5);
  return p[static_cast<size_t>(token)] > std::min(threshold, alpha * std::exp(neg_entropy));
}

TEST(TypicalAcceptance, AgreesWithTheFormulaOverRandomDistributions) {
  std::mt19937_64 rng(3);
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 2 + trial % 60;
    const double sharpness = 0.2 + 0.02 * (trial % 150);  // flat to peaked: both sides of the threshold
    std::normal_distribution<double> g(0.0, sharpness);
    std::vector<double> w(static_cast<size_t>(n));
    double z = 0.0;
    for (auto& x : w) z += (x = std::exp(g(rng)));
    std::vector<double> p;
    std::vector<float> pf;
    for (double x : w) {
      // float probabilities, and the reference computes on exactly those values
      pf.push_back(static_cast<float>(x / z));
      p.push_back(double(pf.back()));
    }
    const double threshold = (trial % 3 == 0) ? 0.09 : 0.02 + 0.001 * (trial % 200);
    const double alpha = (trial % 3 == 0) ? 0.3 : 0.05 + 0.002 * (trial % 300);
    for (int tok = 0; tok < n; ++tok) {
      const bool want = reference_accept(p, tok, threshold, alpha);
      ASSERT_EQ(typical_accept(pf, tok, threshold, alpha), want) << "trial " << trial << " token " << tok;
      (want ? accepted : rejected)++;
    }
  }
  EXPECT_GT(accepted, 100);  // both outcomes occurred: the comparison tested something
  EXPECT_GT(rejected, 100);
}

TEST(TypicalAcceptance, HighEntropyLowersTheBar) {
  // Uniform over 64 tokens: exp(-H) = 1/64 (about), so alpha * exp(-H) ~ 0.0047 < 1/64 and every
  // token is kept although each has probability 1/64, far under the 0.09 threshold.
  std::vector<float> uniform(64, 1.0f / 64.0f);
  EXPECT_TRUE(typical_accept(uniform, 17, 0.09, 0.3));
  // A peaked distribution: the bar is the threshold, and a 5% token falls under it.
  std::vector<float> peaked(20, 0.05f / 19.0f);
  peaked[3] = 0.95f;
  EXPECT_TRUE(typical_accept(peaked, 3, 0.09, 0.3));
  EXPECT_FALSE(typical_accept(peaked, 4, 0.09, 0.3));
}

TEST(TypicalAcceptance, GreedyKeepsOnlyTheArgmaxAndRecoversIt) {
  std::vector<float> one_hot(10, 0.0f);
  one_hot[7] = 1.0f;
  for (int tok = 0; tok < 10; ++tok) EXPECT_EQ(typical_accept(one_hot, tok, 0.09, 0.3), tok == 7);
  EXPECT_EQ(typical_recovered_token(one_hot), 7);
  std::vector<float> p = {0.1f, 0.4f, 0.4f, 0.1f};
  EXPECT_EQ(typical_recovered_token(p), 1);  // the lowest id among equals
}

TEST(TypicalAcceptance, RefusesAnOutOfRangeDraft) {
  std::vector<float> p(4, 0.25f);
  EXPECT_THROW(typical_accept(p, 4, 0.09, 0.3), Error);
  EXPECT_THROW(typical_accept(p, -1, 0.09, 0.3), Error);
}

}  // namespace
}  // namespace cypris
