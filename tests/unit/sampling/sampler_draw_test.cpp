// The draw: support of the truncation samplers over many seeded draws, determinism per request
// regardless of the batch, logprobs of the raw logits, prompt logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"

namespace cypris {
namespace {

std::vector<float> logs(std::initializer_list<double> probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

const std::vector<float> kFive = logs({0.1, 0.5, 0.05, 0.2, 0.15});

Sampler make_sampler(int32_t vocab, int threads = 1) {
  SamplerConfig c;
  c.vocab_size = vocab;
  c.max_log_probs = 5;
  c.num_threads = threads;
  return Sampler(c);
}

// Frequencies of n draws from one row (history does not matter for these params).
std::map<int32_t, double> draw_many(const std::vector<float>& logits, SamplingParams p, int n) {
  p.seed = 1234;
  Sampler s = make_sampler(static_cast<int32_t>(logits.size()));
  SamplingState st(p, {});
  std::vector<SamplerRow> rows = {{&p, &st}};
  std::map<int32_t, double> freq;
  for (int i = 0; i < n; ++i) freq[s.sample(logits.data(), rows)[0].token] += 1.0 / n;
  return freq;
}

void expect_distribution(const std::map<int32_t, double>& freq, const std::map<int32_t, double>& want,
                         double tol = 0.02) {
  // Exactly the expected support, and each frequency within tol of its renormalised probability
  // (20000 draws: standard error <= 0.0036; 4000 draws: <= 0.008).
  ASSERT_EQ(freq.size(), want.size());
  for (const auto& [tok, p] : want) {
    ASSERT_TRUE(freq.count(tok)) << "token " << tok << " never drawn";
    EXPECT_NEAR(freq.at(tok), p, tol) << "token " << tok;
  }
}

TEST(SamplerDraw, PlainSamplingFollowsSoftmax) {
  SamplingParams p;
  expect_distribution(draw_many(kFive, p, 20000), {{0, 0.1}, {1, 0.5}, {2, 0.05}, {3, 0.2}, {4, 0.15}});
}

TEST(SamplerDraw, TopPSupport) {
  SamplingParams p;
  p.top_p = 0.75f;  // {1, 3, 4}, mass 0.85
  expect_distribution(draw_many(kFive, p, 20000), {{1, 0.5 / 0.85}, {3, 0.2 / 0.85}, {4, 0.15 / 0.85}});
}

TEST(SamplerDraw, TopKSupport) {
  SamplingParams p;
  p.top_k = 2;  // {1, 3}, mass 0.7
  expect_distribution(draw_many(kFive, p, 20000), {{1, 0.5 / 0.7}, {3, 0.2 / 0.7}});
  p.top_p = 0.6f;  // then top-p over {0.714, 0.286}: 1 alone has 0.714 >= 0.6
  expect_distribution(draw_many(kFive, p, 2000), {{1, 1.0}});
}

TEST(SamplerDraw, TopKWithTemperatureUsesTheScaledDistribution) {
  SamplingParams p;
  p.top_k = 2;
  p.temperature = 0.5f;  // p^2 over {0.5, 0.2}: 0.25 / 0.29 and 0.04 / 0.29
  expect_distribution(draw_many(kFive, p, 20000), {{1, 0.25 / 0.29}, {3, 0.04 / 0.29}});
}

TEST(SamplerDraw, MinPSupport) {
  SamplingParams p;
  p.min_p = 0.25f;  // {1, 3, 4}
  expect_distribution(draw_many(kFive, p, 20000), {{1, 0.5 / 0.85}, {3, 0.2 / 0.85}, {4, 0.15 / 0.85}});
}

TEST(SamplerDraw, TypicalSupport) {
  SamplingParams p;
  p.typical_p = 0.3f;  // {3, 4} (see the chain test), mass 0.35
  expect_distribution(draw_many(kFive, p, 20000), {{3, 0.2 / 0.35}, {4, 0.15 / 0.35}});
}

TEST(SamplerDraw, TopKLargerThanTheFiniteLogits) {
  // only ids 3 and 7 are finite (the model masked the rest): top_k 5 keeps both
  std::vector<float> x(10, -std::numeric_limits<float>::infinity());
  x[3] = std::log(0.25f);
  x[7] = std::log(0.75f);
  SamplingParams p;
  p.top_k = 5;
  expect_distribution(draw_many(x, p, 4000), {{3, 0.25}, {7, 0.75}}, 0.025);
}

TEST(SamplerDraw, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  expect_distribution(draw_many(kFive, p, 100), {{1, 1.0}});
}

TEST(SamplerDraw, LargeVocabularyTopPAndTopKMatchSupport) {
  // 20k tokens: a few large logits and a long flat tail. top_p 0.9 must keep exactly the head whose
  // mass reaches 0.9; the tail tokens are never drawn.
  const int32_t V = 20000;
  std::vector<float> x(V, -5.0f);
  // head: ids 10, 20, 30 with logits 8, 7, 6: weights e^8=2980.958, e^7=1096.633, e^6=403.429;
  // tail weight 19997 * e^-5 = 19997 * 0.0067379 = 134.739; total 4615.76.
  // Mass ahead of id 30: 4077.591 / 4615.76 = 0.8834 < 0.9 -> kept;
  // ahead of the first tail token: 4481.02 / 4615.76 = 0.9708 >= 0.9 -> dropped.
  x[10] = 8.0f;
  x[20] = 7.0f;
  x[30] = 6.0f;
  SamplingParams p;
  p.top_p = 0.9f;
  const double w8 = std::exp(8.0), w7 = std::exp(7.0), w6 = std::exp(6.0), h = w8 + w7 + w6;
  expect_distribution(draw_many(x, p, 4000), {{10, w8 / h}, {20, w7 / h}, {30, w6 / h}}, 0.025);
  SamplingParams k;
  k.top_k = 2;
  expect_distribution(draw_many(x, k, 4000), {{10, w8 / (w8 + w7)}, {20, w7 / (w8 + w7)}}, 0.025);
}

// --- determinism ---

std::vector<int32_t> run_steps(std::vector<std::pair<SamplingParams, int>> others, const SamplingParams& mine,
                               int position, int threads) {
  // `mine` sits at row `position` among other rows with their own params; 40 steps of random logits
  // (the row's logits depend only on the step, not on the batch layout).
  const int32_t V = 300;
  Sampler s = make_sampler(V, threads);
  std::vector<SamplingParams> params;
  for (auto& [op, seed] : others) {
    op.seed = static_cast<uint64_t>(seed);
    params.push_back(op);
  }
  params.insert(params.begin() + position, mine);
  std::vector<SamplingState> states;
  for (const auto& p : params) states.emplace_back(p, std::vector<int32_t>{1, 2, 3});
  std::vector<SamplerRow> rows;
  for (size_t i = 0; i < params.size(); ++i) rows.push_back({&params[i], &states[i]});
  std::vector<int32_t> tokens;
  for (int step = 0; step < 40; ++step) {
    std::vector<float> logits(params.size() * V);
    for (size_t r = 0; r < params.size(); ++r) {
      std::mt19937 gen(step * 1000 + (r == static_cast<size_t>(position) ? 7 : 100 + static_cast<int>(r)));
      std::normal_distribution<float> nd(0.0f, 2.0f);
      for (int32_t v = 0; v < V; ++v) logits[r * V + v] = nd(gen);
    }
    auto out = s.sample(logits.data(), rows);
    tokens.push_back(out[position].token);
  }
  return tokens;
}

TEST(SamplerDraw, SameSeedSameTokensWhateverTheBatch) {
  SamplingParams mine;
  mine.seed = 42;
  mine.temperature = 0.9f;
  mine.top_p = 0.95f;
  mine.xtc_probability = 0.5f;
  mine.repetition_penalty = 1.1f;
  const auto alone = run_steps({}, mine, 0, 1);
  SamplingParams a, b, c;
  a.temperature = 0.0f;
  b.top_k = 5;
  c.min_p = 0.1f;
  c.dry_multiplier = 0.8f;
  const auto crowded = run_steps({{a, 1}, {b, 2}, {c, 3}, {a, 4}, {b, 5}, {c, 6}, {a, 7}, {b, 8}}, mine, 5, 1);
  const auto threaded = run_steps({{a, 1}, {b, 2}, {c, 3}, {a, 4}, {b, 5}, {c, 6}, {a, 7}, {b, 8}}, mine, 2, 2);
  EXPECT_EQ(alone, crowded);
  EXPECT_EQ(alone, threaded);
  SamplingParams other = mine;
  other.seed = 43;
  EXPECT_NE(alone, run_steps({}, other, 0, 1));
}

TEST(SamplerDraw, SequencesOfOneRequestGetDifferentStreams) {
  SamplingParams p;
  p.seed = 5;
  SamplingState s0(p, {}, 0), s0b(p, {}, 0), s1(p, {}, 1);
  std::vector<double> a, b, c;
  for (int i = 0; i < 8; ++i) {
    a.push_back(s0.uniform());
    b.push_back(s0b.uniform());
    c.push_back(s1.uniform());
    s0.append(1);  // the counter is the output position
    s0b.append(1);
    s1.append(1);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// --- logprobs ---

TEST(SamplerDraw, LogprobsAreLogSoftmaxOfTheRawLogits) {
  // logits [1, 2, 3, 0]: Z = e + e^2 + e^3 + 1 = 2.7182818 + 7.3890561 + 20.0855369 + 1 = 31.1928748
  // ln Z = 3.4401903 -> logprobs [-2.4401903, -1.4401903, -0.4401903, -3.4401903]
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 0.0f};
  Sampler s = make_sampler(4);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 2;
  SamplingState st(p, {});
  std::vector<SamplerRow> rows = {{&p, &st}};
  auto out = s.sample(x.data(), rows)[0];
  EXPECT_EQ(out.token, 2);
  EXPECT_NEAR(out.logprob, -0.4401903, 1e-5);
  EXPECT_EQ(out.rank, 1);
  ASSERT_EQ(out.top_logprobs.size(), 2u);
  EXPECT_EQ(out.top_logprobs[0].token_id, 2);
  EXPECT_NEAR(out.top_logprobs[0].logprob, -0.4401903, 1e-5);
  EXPECT_EQ(out.top_logprobs[1].token_id, 1);
  EXPECT_NEAR(out.top_logprobs[1].logprob, -1.4401903, 1e-5);

  // Processing (a +10 bias on token 0, a temperature) changes the choice, not the reported logprob.
  SamplingParams q;
  q.temperature = 0.0f;
  q.logit_bias = {{0, 10.0f}};
  q.logprobs = 1;
  SamplingState st2(q, {});
  std::vector<SamplerRow> rows2 = {{&q, &st2}};
  out = s.sample(x.data(), rows2)[0];
  EXPECT_EQ(out.token, 0);
  EXPECT_NEAR(out.logprob, -2.4401903, 1e-5);
  EXPECT_EQ(out.rank, 3);  // 3 and 2 are more likely under the raw logits
  ASSERT_EQ(out.top_logprobs.size(), 1u);
  EXPECT_EQ(out.top_logprobs[0].token_id, 2);
}

TEST(SamplerDraw, LogprobsAreCappedByMaxLogProbs) {
  std::vector<float> x(50, 0.0f);
  Sampler s = make_sampler(50);  // max_log_probs 5
  SamplingParams p;
  p.logprobs = 20;
  SamplingState st(p, {});
  std::vector<SamplerRow> rows = {{&p, &st}};
  EXPECT_EQ(s.sample(x.data(), rows)[0].top_logprobs.size(), 5u);
}

TEST(SamplerDraw, SampledTokenIsAppendedToTheState) {
  std::vector<float> x = {0.0f, 9.0f};
  Sampler s = make_sampler(2);
  SamplingParams p;
  p.temperature = 0.0f;
  SamplingState st(p, {7 % 2});
  std::vector<SamplerRow> rows = {{&p, &st}};
  s.sample(x.data(), rows);
  s.sample(x.data(), rows);
  EXPECT_EQ(st.output_ids(), (std::vector<int32_t>{1, 1}));
}

TEST(SamplerDraw, EverythingMaskedFallsBackToTheRawArgmax) {
  std::vector<float> x = {0.0f, 9.0f, 1.0f};
  Sampler s = make_sampler(3);
  SamplingParams p;
  p.allowed_token_ids = std::vector<int32_t>{2};
  p.custom_token_bans = {2};
  SamplingState st(p, {});
  std::vector<SamplerRow> rows = {{&p, &st}};
  EXPECT_EQ(s.sample(x.data(), rows)[0].token, 1);
}

TEST(SamplerDraw, PromptLogprobs) {
  // row 0 [0, ln 3] -> probs [0.25, 0.75]; row 1 [ln 4, 0] -> [0.8, 0.2]
  std::vector<float> x = {0.0f, static_cast<float>(std::log(3.0)), static_cast<float>(std::log(4.0)), 0.0f};
  std::vector<int32_t> next = {0, 0};
  auto out = prompt_logprobs(x.data(), 2, next, 1);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0].logprob, std::log(0.25), 1e-6);
  EXPECT_EQ(out[0].rank, 2);
  ASSERT_EQ(out[0].top_logprobs.size(), 1u);
  EXPECT_EQ(out[0].top_logprobs[0].token_id, 1);
  EXPECT_NEAR(out[0].top_logprobs[0].logprob, std::log(0.75), 1e-6);
  EXPECT_NEAR(out[1].logprob, std::log(0.8), 1e-6);
  EXPECT_EQ(out[1].rank, 1);
}

}  // namespace
}  // namespace cypris
