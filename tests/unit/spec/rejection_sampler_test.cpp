// Rejection sampling keeps the target's distribution: many draws with a fixed RNG, chi-square of
// the emitted tokens against the target probabilities; for a point-mass draft (prompt lookup),
// acceptance probability p(d) and the engine's "draw from p, accept iff equal" verification.
#include "engine/spec/rejection_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/common/error.h"

namespace cypris {
namespace {

std::vector<float> random_distribution(std::mt19937_64& rng, int n, double sharpness) {
  std::normal_distribution<double> g(0.0, sharpness);
  std::vector<double> w(static_cast<size_t>(n));
  double z = 0.0;
  for (auto& x : w) z += (x = std::exp(g(rng)));
  std::vector<float> p;
  for (double x : w) p.push_back(static_cast<float>(x / z));
  return p;
}

// Pearson chi-square of counts against probabilities p over `draws`; cells with expected count < 5
// are pooled.
double chi_square(const std::vector<int64_t>& counts, const std::vector<float>& p, int64_t draws, int* dof) {
  double chi = 0.0, pooled_obs = 0.0, pooled_exp = 0.0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = double(p[i]) * double(draws);
    if (e < 5.0) {
      pooled_obs += double(counts[i]);
      pooled_exp += e;
      continue;
    }
    chi += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++cells;
  }
  if (pooled_exp >= 5.0) {
    chi += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++cells;
  }
  *dof = cells - 1;
  return chi;
}

// Upper 0.1% point of chi-square with dof degrees of freedom (Wilson-Hilferty), so the tests fail
// by chance once in a thousand seeds at most; the RNG is fixed, so they never flake.
double chi_square_limit(int dof) {
  const double z = 3.09;
  const double k = dof;
  return k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3.0);
}

int32_t inverse_cdf(const std::vector<float>& p, double u) {
  double acc = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    acc += p[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(p.size() - 1);
}

TEST(RejectionSampler, EmittedTokensFollowTheTargetForAnyDraft) {
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  constexpr int kVocab = 64;
  constexpr int64_t kDraws = 200000;
  for (int trial = 0; trial < 3; ++trial) {
    const auto p = random_distribution(rng, kVocab, 1.5);
    const auto q = random_distribution(rng, kVocab, 1.5);  // a draft model that disagrees
    std::vector<int64_t> counts(kVocab, 0);
    int64_t accepted = 0;
    for (int64_t n = 0; n < kDraws; ++n) {
      const int32_t d = inverse_cdf(q, u(rng));
      const RejectionResult r = rejection_sample(p, q, d, u(rng), u(rng));
      ++counts[static_cast<size_t>(r.token)];
      accepted += r.accepted;
    }
    int dof = 0;
    const double chi = chi_square(counts, p, kDraws, &dof);
    EXPECT_LT(chi, chi_square_limit(dof)) << "trial " << trial << ": the output is not the target distribution";
    // Acceptance rate: sum_x min(p(x), q(x)).
    double overlap = 0.0;
    for (int i = 0; i < kVocab; ++i) overlap += std::min(p[size_t(i)], q[size_t(i)]);
    EXPECT_NEAR(double(accepted) / kDraws, overlap, 0.01);
  }
}

TEST(RejectionSampler, PointMassDraftAcceptsWithTargetProbabilityAndResamplesTheRest) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  constexpr int kVocab = 32;
  constexpr int64_t kDraws = 200000;
  const auto p = random_distribution(rng, kVocab, 1.0);
  const int32_t d = 3;
  std::vector<float> q(kVocab, 0.0f);
  q[d] = 1.0f;
  std::vector<int64_t> general(kVocab, 0), engine(kVocab, 0);
  int64_t accepted = 0, engine_accepted = 0;
  for (int64_t n = 0; n < kDraws; ++n) {
    const RejectionResult r = rejection_sample(p, q, d, u(rng), u(rng));
    ++general[static_cast<size_t>(r.token)];
    accepted += r.accepted;
    if (!r.accepted) EXPECT_NE(r.token, d) << "a rejected draft is never drawn again";
    // The engine's verification: the target's own draw at the position, accepted iff it equals d.
    const int32_t drawn = inverse_cdf(p, u(rng));
    const std::vector<int32_t> drafts = {d};
    const std::vector<int32_t> targets = {drawn, 0};
    const int32_t emitted = verify_point_mass_drafts(drafts, targets);
    engine_accepted += emitted == 2;
    ++engine[static_cast<size_t>(drawn)];
  }
  EXPECT_NEAR(double(accepted) / kDraws, p[d], 0.005);
  EXPECT_NEAR(double(engine_accepted) / kDraws, p[d], 0.005);
  int dof = 0;
  const double chi_general = chi_square(general, p, kDraws, &dof);
  EXPECT_LT(chi_general, chi_square_limit(dof));
  const double chi_engine = chi_square(engine, p, kDraws, &dof);
  EXPECT_LT(chi_engine, chi_square_limit(dof));
}

TEST(RejectionSampler, VerificationAcceptsTheLongestMatchingPrefixPlusOne) {
  const std::vector<int32_t> drafts = {5, 6, 7};
  EXPECT_EQ(verify_point_mass_drafts(drafts, std::vector<int32_t>{5, 6, 7, 8}), 4);
  EXPECT_EQ(verify_point_mass_drafts(drafts, std::vector<int32_t>{5, 6, 9, 7}), 3);
  EXPECT_EQ(verify_point_mass_drafts(drafts, std::vector<int32_t>{1, 6, 7, 8}), 1);
  EXPECT_EQ(verify_point_mass_drafts({}, std::vector<int32_t>{4}), 1);
}

TEST(RejectionSampler, DraftDrawFollowsItsDistribution) {
  // A draft model's token is drawn from q by draw_from_distribution: chi-square against q.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const auto q = random_distribution(rng, 48, 1.2);
  constexpr int64_t kDraws = 100000;
  std::vector<int64_t> counts(q.size(), 0);
  for (int64_t n = 0; n < kDraws; ++n) counts[static_cast<size_t>(draw_from_distribution(q, u(rng)))]++;
  int dof = 0;
  const double chi = chi_square(counts, q, kDraws, &dof);
  EXPECT_LT(chi, chi_square_limit(dof));
  std::vector<float> point(5, 0.0f);
  point[2] = 1.0f;
  for (double v : {0.0, 0.5, 0.999999}) EXPECT_EQ(draw_from_distribution(point, v), 2);
  EXPECT_THROW(draw_from_distribution(std::vector<float>(4, 0.0f), 0.5), Error);
}

TEST(RejectionSampler, BadInputIsRefused) {
  const std::vector<float> p = {0.5f, 0.5f};
  const std::vector<float> q = {1.0f, 0.0f};
  EXPECT_THROW(rejection_sample(p, std::vector<float>{1.0f}, 0, 0.5, 0.5), Error);
  EXPECT_THROW(rejection_sample(p, q, 2, 0.5, 0.5), Error);
  EXPECT_THROW(rejection_sample(p, q, 1, 0.5, 0.5), Error);  // the draft could not have proposed it
}

}  // namespace
}  // namespace cypris
