// Beam search on a tiny deterministic "model" (a fixed function from token prefix to logits),
// checked against exhaustive search over every sequence.
#include "engine/sampling/beam_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace cypris {
namespace {

constexpr int32_t kEos = 0;

using Model = std::function<std::vector<float>(const std::vector<int32_t>&)>;

// Pseudo-random but fixed logits for every prefix.
std::vector<float> hashed_model(const std::vector<int32_t>& prefix, int32_t vocab) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  std::mt19937_64 gen(h);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> x(vocab);
  for (auto& v : x) v = nd(gen);
  return x;
}

std::vector<double> log_softmax(const std::vector<float>& x) {
  double m = *std::max_element(x.begin(), x.end()), z = 0.0;
  for (float v : x) z += std::exp(v - m);
  std::vector<double> out;
  for (float v : x) out.push_back(v - m - std::log(z));
  return out;
}

struct Scored {
  std::vector<int32_t> tokens;
  double score;
};

// Every sequence that ends with EOS or reaches max_tokens, with its beam score.
std::vector<Scored> exhaustive(const Model& model, int32_t vocab, int max_tokens, int prompt_len, float lp) {
  std::vector<Scored> all;
  std::function<void(std::vector<int32_t>&, double)> rec = [&](std::vector<int32_t>& prefix, double cum) {
    const auto lps = log_softmax(model(prefix));
    for (int32_t t = 0; t < vocab; ++t) {
      prefix.push_back(t);
      const double c = cum + lps[t];
      if (t == kEos || static_cast<int>(prefix.size()) == max_tokens) {
        const int len = prompt_len + static_cast<int>(prefix.size()) - (t == kEos ? 1 : 0);
        all.push_back({prefix, c / std::pow(static_cast<double>(len), lp)});
      } else {
        rec(prefix, c);
      }
      prefix.pop_back();
    }
  };
  std::vector<int32_t> start;
  rec(start, 0.0);
  std::sort(all.begin(), all.end(), [](const Scored& a, const Scored& b) { return a.score > b.score; });
  return all;
}

std::vector<BeamHypothesis> run_beam(const Model& model, int32_t vocab, BeamSearchConfig cfg, int n,
                                     int* steps = nullptr) {
  BeamSearch bs(cfg);
  int count = 0;
  while (!bs.done()) {
    std::vector<float> rows;
    for (const auto& h : bs.running()) {
      auto x = model(h.tokens);
      rows.insert(rows.end(), x.begin(), x.end());
    }
    log_softmax_rows(rows.data(), static_cast<int>(bs.running().size()), vocab);
    bs.step(rows.data(), vocab);
    ++count;
  }
  if (steps) *steps = count;
  return bs.best(n);
}

BeamSearchConfig config(int width, float lp, EarlyStopping es, int max_tokens, int prompt_len) {
  BeamSearchConfig c;
  c.beam_width = width;
  c.length_penalty = lp;
  c.early_stopping = es;
  c.max_tokens = max_tokens;
  c.prompt_len = prompt_len;
  c.max_model_len = 4096;
  c.eos_token_id = kEos;
  return c;
}

TEST(BeamSearch, WideBeamWithNeverEqualsExhaustiveSearch) {
  // vocab 3 (EOS 0), 4 tokens: at most 8 open prefixes per step, so width 16 keeps every one and the
  // "never" rule may stop only when nothing better is reachable: the result must be the exact top 3.
  const int32_t V = 3;
  const Model model = [](const std::vector<int32_t>& p) { return hashed_model(p, 3); };
  for (float lp : {0.0f, 0.5f, 1.0f, 2.0f, -0.5f}) {
    const auto want = exhaustive(model, V, 4, 5, lp);
    const auto got = run_beam(model, V, config(16, lp, EarlyStopping::Never, 4, 5), 3);
    ASSERT_EQ(got.size(), 3u) << lp;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "length_penalty " << lp << " rank " << i;
      const BeamSearch scorer(config(16, lp, EarlyStopping::Never, 4, 5));
      EXPECT_NEAR(scorer.score(got[i]), want[i].score, 1e-5) << lp;
    }
  }
}

TEST(BeamSearch, BeamOfTwoFindsWhatGreedyMisses) {
  // step 1: p(1) = 0.6, p(2) = 0.4. After 1 every next token is 1/3; after 2, EOS has 0.9.
  // Sequences (max 2 tokens, length_penalty 0 = plain sum of logprobs):
  //   [1, x] = 0.6 * 1/3 = 0.2 for each x;  [2, EOS] = 0.4 * 0.9 = 0.36  <- best
  const int32_t V = 3;
  const Model model = [](const std::vector<int32_t>& p) -> std::vector<float> {
    if (p.empty()) return {-30.0f, std::log(0.6f), std::log(0.4f)};
    if (p[0] == 1) return {0.0f, 0.0f, 0.0f};
    return {std::log(0.9f), std::log(0.05f), std::log(0.05f)};
  };
  const auto want = exhaustive(model, V, 2, 1, 0.0f);
  EXPECT_EQ(want[0].tokens, (std::vector<int32_t>{2, 0}));
  EXPECT_NEAR(want[0].score, std::log(0.36), 1e-6);
  const auto beam2 = run_beam(model, V, config(2, 0.0f, EarlyStopping::Never, 2, 1), 1);
  EXPECT_EQ(beam2[0].tokens, want[0].tokens);
  EXPECT_NEAR(beam2[0].cum_logprob, std::log(0.36), 1e-5);
  const auto greedy = run_beam(model, V, config(1, 0.0f, EarlyStopping::Never, 2, 1), 1);
  EXPECT_EQ(greedy[0].tokens[0], 1);  // width 1 commits to the locally best token
}

TEST(BeamSearch, EarlyStoppingTrueStopsOnceBestOfHypothesesFinished) {
  // After any first token EOS is very likely, so two hypotheses finish at step 2; true stops there.
  // With "never" and length_penalty 2 (longer is better), the search goes on.
  const int32_t V = 4;
  const Model model = [](const std::vector<int32_t>& p) -> std::vector<float> {
    if (p.empty()) return {-30.0f, 1.0f, 0.5f, 0.0f};
    return {3.0f, 0.0f, 0.0f, 0.0f};
  };
  int steps_true = 0, steps_never = 0;
  auto t = run_beam(model, V, config(2, 1.0f, EarlyStopping::True, 6, 3), 2, &steps_true);
  EXPECT_EQ(steps_true, 2);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].tokens.back(), kEos);
  run_beam(model, V, config(2, 2.0f, EarlyStopping::Never, 6, 3), 2, &steps_never);
  EXPECT_GT(steps_never, 2);
  // and "never" is still exact here (width 2 is enough on this model): compare with exhaustive
  const auto want = exhaustive(model, V, 6, 3, 2.0f);
  const auto got = run_beam(model, V, config(8, 2.0f, EarlyStopping::Never, 6, 3), 1);
  EXPECT_EQ(got[0].tokens, want[0].tokens);
}

TEST(BeamSearch, ParentsPointIntoThePreviousRunningList) {
  const int32_t V = 5;
  const Model model = [](const std::vector<int32_t>& p) { return hashed_model(p, 5); };
  BeamSearch bs(config(3, 1.0f, EarlyStopping::False, 5, 2));
  std::vector<std::vector<int32_t>> prev = {{}};
  while (!bs.done()) {
    std::vector<float> rows;
    for (const auto& h : bs.running()) {
      auto x = model(h.tokens);
      rows.insert(rows.end(), x.begin(), x.end());
    }
    log_softmax_rows(rows.data(), static_cast<int>(bs.running().size()), V);
    bs.step(rows.data(), V);
    EXPECT_LE(bs.running().size(), 3u);
    EXPECT_LE(bs.finished().size(), 3u);
    for (const auto& h : bs.running()) {
      ASSERT_GE(h.parent, 0);
      ASSERT_LT(h.parent, static_cast<int>(prev.size()));
      std::vector<int32_t> head(h.tokens.begin(), h.tokens.end() - 1);
      EXPECT_EQ(head, prev[h.parent]);
    }
    prev.clear();
    for (const auto& h : bs.running()) prev.push_back(h.tokens);
  }
  EXPECT_FALSE(bs.best(2).empty());
}

TEST(BeamSearch, ConfigFromParams) {
  SamplingParams p;
  p.use_beam_search = true;
  p.n = 2;
  p.best_of = 4;
  p.length_penalty = 0.7f;
  p.early_stopping = EarlyStopping::Never;
  p.max_tokens.reset();
  const auto c = BeamSearchConfig::from_params(p, 100, 512, 2);
  EXPECT_EQ(c.beam_width, 4);
  EXPECT_EQ(c.max_tokens, 412);
  EXPECT_EQ(c.early_stopping, EarlyStopping::Never);
  EXPECT_EQ(c.eos_token_id, 2);
}

}  // namespace
}  // namespace cypris
