// Each sampler against hand-computed expectations on small logit vectors. The expected numbers are
// worked out by hand in the comments, not taken from running the code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "engine/sampling/sampler.h"

namespace cypris {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// log of the probabilities, so softmax(logits) == probs exactly (they sum to 1).
std::vector<float> logs(std::initializer_list<double> probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

std::set<int32_t> live(const std::vector<float>& x) {
  std::set<int32_t> s;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != kNegInf) s.insert(static_cast<int32_t>(i));
  }
  return s;
}

struct Harness {
  explicit Harness(int32_t vocab, std::optional<int32_t> eos = std::nullopt) : sampler(make(vocab, eos)) {}
  static SamplerConfig make(int32_t vocab, std::optional<int32_t> eos) {
    SamplerConfig c;
    c.vocab_size = vocab;
    c.max_log_probs = 20;
    c.eos_token_id = eos;
    return c;
  }
  std::vector<float> process(const std::vector<float>& logits, const SamplingParams& p,
                             std::vector<int32_t> prompt = {}, std::vector<int32_t> output = {}) {
    SamplingState s(p, std::move(prompt));
    for (int32_t t : output) s.append(t);
    return sampler.process(logits, p, s);
  }
  Sampler sampler;
};

// probs by id: 0:0.1 1:0.5 2:0.05 3:0.2 4:0.15; sorted: 1 (0.5), 3 (0.2), 4 (0.15), 0 (0.1), 2 (0.05)
const std::vector<float> kFive = logs({0.1, 0.5, 0.05, 0.2, 0.15});

TEST(SamplerChain, Penalties) {
  // logits [2, -1, 0.5, 3, 1]; prompt [0, 1]; output [1, 3, 3]; rep 2, freq 0.5, presence 0.25
  // 0: in prompt, positive -> 2/2 = 1; not in output -> 1
  // 1: in prompt, negative -> -1*2 = -2; output count 1 -> -2 - 0.5 - 0.25 = -2.75
  // 2: unseen -> 0.5
  // 3: in output, 3/2 = 1.5; count 2 -> 1.5 - 1.0 - 0.25 = 0.25
  // 4: unseen -> 1
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Harness r(5);
  auto x = r.process({2.0f, -1.0f, 0.5f, 3.0f, 1.0f}, p, {0, 1}, {1, 3, 3});
  const std::vector<float> want = {1.0f, -2.75f, 0.5f, 0.25f, 1.0f};
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(x[i], want[i]) << i;
}

TEST(SamplerChain, Temperature) {
  SamplingParams p;
  p.temperature = 0.5f;  // [1, 2, -3] / 0.5 = [2, 4, -6]
  Harness r(3);
  auto x = r.process({1.0f, 2.0f, -3.0f}, p);
  EXPECT_FLOAT_EQ(x[0], 2.0f);
  EXPECT_FLOAT_EQ(x[1], 4.0f);
  EXPECT_FLOAT_EQ(x[2], -6.0f);
}

TEST(SamplerChain, DynamicTemperature) {
  // logits [ln 3, 0, 0] -> probs [0.6, 0.2, 0.2]
  // H = 0.6*ln(1/0.6) + 2*0.2*ln(5) = 0.6*0.5108256 + 0.4*1.6094379 = 0.9502705; H_max = ln 3 = 1.0986123
  // norm = 0.9502705 / 1.0986123 = 0.8649720
  // exponent 1: T = 0.5 + (1.5 - 0.5) * 0.864972 = 1.364972 -> ln3 / T = 0.804861
  // exponent 2: T = 0.5 + 0.864972^2 = 0.5 + 0.748177 = 1.248177 -> ln3 / T = 0.880173
  SamplingParams p;
  p.dynatemp_min = 0.5f;
  p.dynatemp_max = 1.5f;
  Harness r(3);
  const std::vector<float> in = {static_cast<float>(std::log(3.0)), 0.0f, 0.0f};
  auto x = r.process(in, p);
  EXPECT_NEAR(x[0], 0.804861, 1e-4);
  EXPECT_FLOAT_EQ(x[1], 0.0f);
  p.dynatemp_exponent = 2.0f;
  x = r.process(in, p);
  EXPECT_NEAR(x[0], 0.880173, 1e-4);
}

TEST(SamplerChain, DynatempRangeConversion) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.apply_dynatemp_range(0.25f);  // 1 -/+ 0.25
  EXPECT_FLOAT_EQ(p.dynatemp_min, 0.75f);
  EXPECT_FLOAT_EQ(p.dynatemp_max, 1.25f);
  p.apply_dynatemp_range(3.0f);  // min clamps at 0
  EXPECT_FLOAT_EQ(p.dynatemp_min, 0.0f);
  EXPECT_FLOAT_EQ(p.dynatemp_max, 4.0f);
  p.apply_dynatemp_range(0.0f);
  EXPECT_FALSE(p.dynatemp_enabled());
}

TEST(SamplerChain, TopK) {
  SamplingParams p;
  p.top_k = 3;  // [1, 5, 3, 4, 2]: the three largest are 5 (id 1), 4 (id 3), 3 (id 2)
  Harness r(5);
  auto x = r.process({1.0f, 5.0f, 3.0f, 4.0f, 2.0f}, p);
  EXPECT_EQ(live(x), (std::set<int32_t>{1, 2, 3}));
  EXPECT_FLOAT_EQ(x[1], 5.0f);
  p.top_k = 0;  // off
  EXPECT_EQ(live(r.process({1.0f, 5.0f, 3.0f, 4.0f, 2.0f}, p)).size(), 5u);
}

TEST(SamplerChain, TopKOverALargeVocabularyKeepsBoundaryTies) {
  // value(i) = ((i * 7919) mod 1000) / 10: a permutation of 0.0 .. 99.9 over 1000 ids. The 10 largest
  // are the values 99.0 .. 99.9; a copy of 99.0 put on another id ties with the 10th and survives.
  Harness r(1000);
  std::vector<float> x(1000);
  for (int i = 0; i < 1000; ++i) x[i] = static_cast<float>((i * 7919) % 1000) / 10.0f;
  SamplingParams p;
  p.top_k = 10;
  auto kept = live(r.process(x, p));
  ASSERT_EQ(kept.size(), 10u);
  for (int32_t id : kept) EXPECT_GE((id * 7919) % 1000, 990) << id;
  const int32_t tie = *std::find_if(kept.begin(), kept.end(), [](int32_t id) { return (id * 7919) % 1000 == 990; });
  const int32_t other = tie == 0 ? 1 : 0;
  x[other] = x[tie];
  kept = live(r.process(x, p));
  EXPECT_EQ(kept.size(), 11u);
  EXPECT_TRUE(kept.count(other));
}

TEST(SamplerChain, TopP) {
  // mass strictly ahead of each token in sorted order: 1:0, 3:0.5, 4:0.7, 0:0.85, 2:0.95
  SamplingParams p;
  Harness r(5);
  p.top_p = 0.75f;  // kept while mass ahead < 0.75: 1, 3, 4
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1, 3, 4}));
  p.top_p = 0.6f;  // 1, 3
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1, 3}));
  p.top_p = 0.3f;  // 1 only
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1}));
  p.top_p = 0.6f;
  p.top_k = 1;  // top-k first
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1}));
}

TEST(SamplerChain, TopPOverAFlatVocabulary) {
  // Flat rows take the bucketed path (the head near the max is too big to sort).
  Harness r(20000);
  SamplingParams p;
  p.top_p = 0.5f;
  // id 0 at 1, the rest at 0: Z = e + 19999 = 20001.718, target 10000.859. Ties keep lower ids first;
  // id j >= 1 stays while the mass ahead, e + (j - 1), is below the target: j <= 9999.
  std::vector<float> x(20000, 0.0f);
  x[0] = 1.0f;
  auto live_ids = live(r.process(x, p));
  EXPECT_EQ(live_ids.size(), 10000u);
  EXPECT_EQ(*live_ids.rbegin(), 9999);
  // ids 0..99 at 0, the rest at -3: Z = 100 + 19900 e^-3 = 100 + 990.7627 = 1090.7627, target 545.3814.
  // The head holds 100; tail token k (id 100 + k) stays while 100 + k * 0.0497871 < 545.3814, i.e.
  // k < 8945.7: ids 100..9045.
  std::vector<float> y(20000, -3.0f);
  for (int i = 0; i < 100; ++i) y[i] = 0.0f;
  live_ids = live(r.process(y, p));
  EXPECT_EQ(live_ids.size(), 9046u);
  EXPECT_EQ(*live_ids.rbegin(), 9045);
}

TEST(SamplerChain, MinP) {
  SamplingParams p;
  Harness r(5);
  p.min_p = 0.25f;  // threshold 0.25 * 0.5 = 0.125: keeps 0.5, 0.2, 0.15
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1, 3, 4}));
  p.min_p = 0.35f;  // 0.175: keeps 0.5, 0.2
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1, 3}));
}

TEST(SamplerChain, TopA) {
  SamplingParams p;
  Harness r(5);
  p.top_a = 0.5f;  // threshold 0.5 * 0.5^2 = 0.125: keeps 0.5, 0.2, 0.15
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1, 3, 4}));
  p.top_a = 0.9f;  // 0.225: keeps 0.5
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1}));
}

TEST(SamplerChain, EpsilonCutoff) {
  SamplingParams p;
  Harness r(5);
  p.epsilon_cutoff = 800;  // 0.08: drops 0.05 (id 2)
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{0, 1, 3, 4}));
  // Everything below the cutoff: the most likely token is kept anyway. probs [0.3, 0.35, 0.35]
  // would keep all; use a flat vocabulary of 20 (0.05 each) and cutoff 0.08: only the argmax (id 0).
  Harness r20(20);
  p.epsilon_cutoff = 800;
  EXPECT_EQ(live(r20.process(std::vector<float>(20, 0.0f), p)), (std::set<int32_t>{0}));
}

TEST(SamplerChain, EtaCutoff) {
  // H = 0.5 ln2 + 0.2 ln5 + 0.15 ln(1/0.15) + 0.1 ln10 + 0.05 ln20
  //   = 0.3465736 + 0.3218876 + 0.2845680 + 0.2302585 + 0.1497866 = 1.3330743; e^-H = 0.263671
  SamplingParams p;
  Harness r(5);
  p.eta_cutoff = 1000;  // eta 0.1: eps = min(0.1, sqrt(0.1) * 0.263671 = 0.083380) -> drops 0.05
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{0, 1, 3, 4}));
  p.eta_cutoff = 4000;  // eta 0.4: eps = min(0.4, 0.632456 * 0.263671 = 0.166757) -> keeps 0.5, 0.2
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{1, 3}));
}

TEST(SamplerChain, Typical) {
  // H = 1.3330743 (above). |H - surprise|: 0.5: |1.3331-0.6931| = 0.6400; 0.2: |1.3331-1.6094| = 0.2764;
  // 0.15: |1.3331-1.8971| = 0.5640; 0.1: |1.3331-2.3026| = 0.9695; 0.05: |1.3331-2.9957| = 1.6627
  // order: id3 (0.2), id4 (0.15), id1 (0.5), id0 (0.1), id2 (0.05); keep until the mass reaches typical_p
  SamplingParams p;
  Harness r(5);
  p.typical_p = 0.3f;  // 0.2 -> 0.35 >= 0.3: {3, 4}
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{3, 4}));
  p.typical_p = 0.9f;  // 0.2, 0.35, 0.85, 0.95: {3, 4, 1, 0}
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{0, 1, 3, 4}));
  p.typical_p = 0.15f;  // the first alone reaches it
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{3}));
}

TEST(SamplerChain, TailFree) {
  // probs by id [0.15, 0.4, 0.05, 0.3, 0.1]; sorted [0.4, 0.3, 0.15, 0.1, 0.05]
  // d2 = |0.4 - 0.6 + 0.15| = 0.05, |0.3 - 0.3 + 0.1| = 0.1, |0.15 - 0.2 + 0.05| = 0 -> total 0.15
  // cdf = [1/3, 1, 1]; sorted position j >= 1 goes when cdf[j-1] > tfs; the last position always goes
  SamplingParams p;
  Harness r(5);
  const auto in = logs({0.15, 0.4, 0.05, 0.3, 0.1});
  p.tfs = 0.5f;  // j=1: 1/3 <= 0.5 keep; j=2: 1 > 0.5 cut -> {id1, id3}
  EXPECT_EQ(live(r.process(in, p)), (std::set<int32_t>{1, 3}));
  p.tfs = 0.2f;  // j=1: 1/3 > 0.2 cut -> {id1}
  EXPECT_EQ(live(r.process(in, p)), (std::set<int32_t>{1}));
}

TEST(SamplerChain, TopNsigma) {
  // [0, 1, 2, 3, 4]: mean 2, sample variance (4+1+0+1+4)/4 = 2.5, std = 1.5811
  SamplingParams p;
  Harness r(5);
  const std::vector<float> in = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f};
  p.nsigma = 1.0f;  // threshold 4 - 1.5811 = 2.4189: {3, 4}
  EXPECT_EQ(live(r.process(in, p)), (std::set<int32_t>{3, 4}));
  p.nsigma = 2.0f;  // 4 - 3.1623 = 0.8377: {1, 2, 3, 4}
  EXPECT_EQ(live(r.process(in, p)), (std::set<int32_t>{1, 2, 3, 4}));
}

TEST(SamplerChain, QuadraticAndCubic) {
  // v' = max + s d^3 - k d^2, d = v - max, k = f(3 - c)/2, s = f(c - 1)/2
  SamplingParams p;
  Harness r(3);
  p.smoothing_factor = 1.0f;  // curve 1: k = 1, s = 0 -> [0, -1, -4]
  auto x = r.process({0.0f, -1.0f, -2.0f}, p);
  EXPECT_FLOAT_EQ(x[0], 0.0f);
  EXPECT_FLOAT_EQ(x[1], -1.0f);
  EXPECT_FLOAT_EQ(x[2], -4.0f);
  p.smoothing_curve = 2.0f;  // k = 0.5, s = 0.5: d=-1: -0.5 - 0.5 = -1; d=-2: -4 - 2 = -6
  x = r.process({0.0f, -1.0f, -2.0f}, p);
  EXPECT_FLOAT_EQ(x[1], -1.0f);
  EXPECT_FLOAT_EQ(x[2], -6.0f);
}

TEST(SamplerChain, Xtc) {
  SamplingParams p;
  Harness r(5);
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.12f;  // at/above: 0.5 (1), 0.2 (3), 0.15 (4) -> drop 1 and 3, keep 4 and the rest
  EXPECT_EQ(live(r.process(kFive, p)), (std::set<int32_t>{0, 2, 4}));
  p.xtc_threshold = 0.3f;  // only the top is above: nothing happens
  EXPECT_EQ(live(r.process(kFive, p)).size(), 5u);
  p.xtc_threshold = 0.12f;
  p.xtc_probability = 0.0f;  // off
  EXPECT_EQ(live(r.process(kFive, p)).size(), 5u);
}

TEST(SamplerChain, XtcProbabilityIsPerStepChance) {
  SamplingParams p;
  p.seed = 7;
  p.xtc_probability = 0.3f;
  p.xtc_threshold = 0.12f;
  Harness r(5);
  SamplingState s(p, {});
  int applied = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    applied += live(r.sampler.process(kFive, p, s)).count(1) == 0;
    s.append(0);  // the coin is drawn per output position (the request's Philox counter)
  }
  EXPECT_NEAR(applied / static_cast<double>(n), 0.3, 0.03);
}

TEST(SamplerChain, DryPenalisesTheTokenThatWouldExtendARepeat) {
  SamplingParams p;
  p.dry_multiplier = 1.0f;
  p.dry_base = 2.0f;
  p.dry_allowed_length = 2;
  p.dry_sequence_breaker_ids = {9};
  Harness r(10);
  const std::vector<float> zeros(10, 0.0f);
  // [1 2 3 4 9 1 2 3]: last 3; earlier 3 at index 2 followed by 4; backwards 2=2, 1=1 -> len 3
  // penalty 1 * 2^(3-2) = 2 on token 4
  auto x = r.process(zeros, p, {1, 2, 3, 4, 9, 1, 2, 3});
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(x[i], i == 4 ? -2.0f : 0.0f) << i;
  // prompt and output both count: same history split across them
  x = r.process(zeros, p, {1, 2, 3, 4}, {9, 1, 2, 3});
  EXPECT_FLOAT_EQ(x[4], -2.0f);
  // [5 6 7 5]: 5 followed by 6 earlier, no longer match -> len 1 < allowed 2: no penalty
  x = r.process(zeros, p, {5, 6, 7, 5});
  EXPECT_FLOAT_EQ(x[6], 0.0f);
  p.dry_allowed_length = 1;  // now len 1 >= 1: penalty 1 * 2^0 = 1
  x = r.process(zeros, p, {5, 6, 7, 5});
  EXPECT_FLOAT_EQ(x[6], -1.0f);
}

// The 2026 Aphrodite's DRY limits, as request fields (hand-computed like the tests above).
TEST(SamplerChain, DryMaxNgramOccurrencesAndEarlyExit) {
  SamplingParams p;
  p.dry_multiplier = 1.0f;
  p.dry_base = 2.0f;
  p.dry_allowed_length = 1;
  p.dry_sequence_breaker_ids = {9};
  Harness r(10);
  const std::vector<float> zeros(10, 0.0f);
  // [1 2 3 4 | 5 3 6 | 1 2 3]: last 3; the 3 at index 5 (followed by 6) matches 1 token, the one at
  // index 2 (followed by 4) matches 1 2 3 -> len 3: 2^(3-1) = 4 on 4, 2^0 = 1 on 6.
  const std::vector<int32_t> h = {1, 2, 3, 4, 5, 3, 6, 1, 2, 3};
  auto x = r.process(zeros, p, h);
  EXPECT_FLOAT_EQ(x[4], -4.0f);
  EXPECT_FLOAT_EQ(x[6], -1.0f);
  p.dry_max_ngram = 2;  // the match is cut at 2 tokens: 2^(2-1) = 2 on 4
  x = r.process(zeros, p, h);
  EXPECT_FLOAT_EQ(x[4], -2.0f);
  p.dry_max_ngram = 100;
  p.dry_max_occurrences = 1;  // only the most recent earlier 3 (index 5) is searched
  x = r.process(zeros, p, h);
  EXPECT_FLOAT_EQ(x[4], 0.0f);
  EXPECT_FLOAT_EQ(x[6], -1.0f);
  p.dry_max_occurrences = 0;
  p.dry_early_exit_match_len = 1;  // the first occurrence searched (index 5, len 1) ends the search
  x = r.process(zeros, p, h);
  EXPECT_FLOAT_EQ(x[4], 0.0f);
  EXPECT_FLOAT_EQ(x[6], -1.0f);
}

TEST(SamplerChain, DryBreakersAndRange) {
  SamplingParams p;
  p.dry_multiplier = 1.0f;
  p.dry_base = 2.0f;
  p.dry_allowed_length = 1;
  p.dry_sequence_breaker_ids = {9};
  Harness r(10);
  const std::vector<float> zeros(10, 0.0f);
  // the token after the earlier occurrence is a breaker: never penalised
  auto x = r.process(zeros, p, {1, 9, 0, 1});
  EXPECT_EQ(live(x).size(), 10u);
  for (float v : x) EXPECT_FLOAT_EQ(v, 0.0f);
  // last token is a breaker: DRY does nothing
  x = r.process(zeros, p, {1, 2, 1, 2, 9});
  for (float v : x) EXPECT_FLOAT_EQ(v, 0.0f);
  // a breaker inside the match stops it: [3 9 1 5 | 3 9 1]: last 1, earlier 1 at 2 followed by 5;
  // backwards 9 is a breaker -> len 1, penalty 2^0 = 1
  x = r.process(zeros, p, {3, 9, 1, 5, 3, 9, 1});
  EXPECT_FLOAT_EQ(x[5], -1.0f);
  // dry_range: [1 2 3 4 0 0 0 1 2 3]: whole context -> 1 2 3 matches, len 3, 1 * 2^(3-1) = 4 on token 4
  p.dry_allowed_length = 1;
  x = r.process(zeros, p, {1, 2, 3, 4, 0, 0, 0, 1, 2, 3});
  EXPECT_FLOAT_EQ(x[4], -4.0f);
  p.dry_range = 4;  // only [0 1 2 3] is searched: 3 does not occur earlier
  x = r.process(zeros, p, {1, 2, 3, 4, 0, 0, 0, 1, 2, 3});
  EXPECT_FLOAT_EQ(x[4], 0.0f);
}

TEST(SamplerChain, DrySequenceBreakersBecomeTheLastTokenOfAPlusString) {
  SamplingParams p;
  p.dry_sequence_breakers = {"\n", ":", "", "ab"};
  // fake tokenizer: one id per byte (the byte value); "a"+s -> last byte
  p.resolve_dry_sequence_breakers([](const std::string& s) {
    std::vector<int32_t> ids;
    for (unsigned char c : s) ids.push_back(c);
    return ids;
  });
  EXPECT_EQ(p.dry_sequence_breaker_ids, (std::vector<int32_t>{'\n', ':', 'b'}));
}

TEST(SamplerChain, NoRepeatNgram) {
  SamplingParams p;
  Harness r(6);
  const std::vector<float> zeros(6, 0.0f);
  p.no_repeat_ngram_size = 2;  // [1 2 3 1]: prefix (1); (1,2) seen -> ban 2
  EXPECT_EQ(live(r.process(zeros, p, {1, 2, 3, 1})), (std::set<int32_t>{0, 1, 3, 4, 5}));
  p.no_repeat_ngram_size = 3;  // [1 2 3] + output [1 2]: prefix (1,2); (1,2,3) seen -> ban 3
  EXPECT_EQ(live(r.process(zeros, p, {1, 2, 3}, {1, 2})), (std::set<int32_t>{0, 1, 2, 4, 5}));
}

TEST(SamplerChain, PreChainMasks) {
  Harness r(6, /*eos=*/0);
  const std::vector<float> zeros(6, 0.0f);
  SamplingParams p;
  p.min_tokens = 2;
  p.stop_token_ids = {3};
  // one output token so far < 2: EOS (0) and stop id 3 are banned
  EXPECT_EQ(live(r.process(zeros, p, {5}, {4})), (std::set<int32_t>{1, 2, 4, 5}));
  // two output tokens: nothing banned
  EXPECT_EQ(live(r.process(zeros, p, {5}, {4, 4})).size(), 6u);
  p.ignore_eos = true;  // EOS does not stop, so it is not banned
  EXPECT_EQ(live(r.process(zeros, p, {5}, {4})), (std::set<int32_t>{0, 1, 2, 4, 5}));

  SamplingParams q;
  q.custom_token_bans = {4};
  q.allowed_token_ids = std::vector<int32_t>{1, 2, 4};
  q.logit_bias = {{1, 2.5f}, {5, 3.0f}};
  auto x = r.process(zeros, q);
  EXPECT_EQ(live(x), (std::set<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(x[1], 2.5f);
  EXPECT_FLOAT_EQ(x[2], 0.0f);
}

TEST(SamplerChain, GuidedDecodingBitmask) {
  // 40 tokens: bits set for ids 3, 31, 32 and 39 only (words 0 and 1)
  Harness r(40);
  const uint32_t mask[2] = {(1u << 3) | (1u << 31), (1u << 0) | (1u << 7)};
  SamplingParams p;
  SamplingState s(p, {});
  EXPECT_EQ(live(r.sampler.process(std::vector<float>(40, 0.0f), p, s, mask)), (std::set<int32_t>{3, 31, 32, 39}));
  p.temperature = 0.0f;
  std::vector<float> x(40, 0.0f);
  x[0] = 5.0f;  // the model's favourite is not allowed
  x[32] = 1.0f;
  std::vector<SamplerRow> rows = {{&p, &s, mask}};
  EXPECT_EQ(r.sampler.sample(x.data(), rows)[0].token, 32);
}

TEST(SamplerChain, TemperatureLastAndSamplerPriority) {
  // [0, -1, -2] with temperature 2 and min_p 0.3
  // temperature first: [0, -0.5, -1], ratios 1, 0.607, 0.368 >= 0.3 -> all stay
  // min_p first: ratios 1, 0.368, 0.135 -> id 2 goes; then temperature -> [0, -0.5, -inf]
  SamplingParams p;
  p.temperature = 2.0f;
  p.min_p = 0.3f;
  Harness r(3);
  const std::vector<float> in = {0.0f, -1.0f, -2.0f};
  auto x = r.process(in, p);
  EXPECT_EQ(live(x).size(), 3u);
  EXPECT_FLOAT_EQ(x[2], -1.0f);
  p.temperature_last = true;
  x = r.process(in, p);
  EXPECT_EQ(live(x), (std::set<int32_t>{0, 1}));
  EXPECT_FLOAT_EQ(x[1], -0.5f);
  // sampler_priority overrides temperature_last
  const std::vector<std::string> names = {
      "min_p",           "TEMPERATURE", "top_p_top_k", "top_a",          "tfs",       "typical_p", "penalties", "dry",
      "no_repeat_ngram", "top_nsigma",  "eta_cutoff",  "epsilon_cutoff", "quadratic", "xtc"};
  p.sampler_priority = parse_sampler_priority(names);
  p.temperature_last = false;
  EXPECT_EQ(live(r.process(in, p)), (std::set<int32_t>{0, 1}));
  const std::vector<int> ids = {5, 2, 0, 1, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13};
  p.sampler_priority = parse_sampler_priority(ids);  // temperature first again
  EXPECT_EQ(live(r.process(in, p)).size(), 3u);
}

TEST(SamplerChain, MirostatMasksBySurpriseAndUpdatesMu) {
  // probs [0.5, 0.25, 0.125, 0.125]: surprise (bits) 1, 2, 3, 3. tau 1.25 -> mu = 2.5: keep {0, 1}
  SamplingParams p;
  p.mirostat_mode = 2;
  p.mirostat_tau = 1.25f;
  p.mirostat_eta = 0.1f;
  p.seed = 3;
  Harness r(4);
  const auto in = logs({0.5, 0.25, 0.125, 0.125});
  SamplingState s(p, {});
  EXPECT_FLOAT_EQ(s.mirostat_mu(), 2.5f);
  EXPECT_EQ(live(r.sampler.process(in, p, s)), (std::set<int32_t>{0, 1}));
  // after drawing token t: mu -= eta * (surprise(t) - tau): t=0 -> 2.5 + 0.025; t=1 -> 2.5 - 0.075
  std::vector<SamplerRow> rows = {{&p, &s}};
  auto out = r.sampler.sample(in.data(), rows);
  ASSERT_TRUE(out[0].token == 0 || out[0].token == 1);
  EXPECT_NEAR(s.mirostat_mu(), out[0].token == 0 ? 2.525 : 2.425, 1e-5);
}

TEST(SamplerChain, SkewReshapesCumulativeProbabilitiesInVocabularyOrder) {
  // probs [0.25, 0.25, 0.5], skew ln 2 -> exponent 2: cum [0.25, 0.5, 1] -> [0.0625, 0.25, 1]
  // -> p = [0.0625, 0.1875, 0.75]
  SamplingParams p;
  p.skew = static_cast<float>(std::log(2.0));
  Harness r(3);
  SamplingState s(p, {});
  auto pr = r.sampler.probabilities(logs({0.25, 0.25, 0.5}), p, s);
  EXPECT_NEAR(pr[0], 0.0625, 1e-6);
  EXPECT_NEAR(pr[1], 0.1875, 1e-6);
  EXPECT_NEAR(pr[2], 0.75, 1e-6);
}

TEST(SamplerChain, GreedyTakesTheArgmaxOfTheProcessedLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  Harness r(2);
  SamplingState s(p, {}, 0);
  s.append(0);
  // [3.0, 2.9]: token 0 was generated -> 3.0 / 2 = 1.5 < 2.9 -> token 1
  std::vector<float> in = {3.0f, 2.9f};
  std::vector<SamplerRow> rows = {{&p, &s}};
  EXPECT_EQ(r.sampler.sample(in.data(), rows)[0].token, 1);
  SamplingParams plain;
  plain.temperature = 0.0f;
  SamplingState s2(plain, {});
  std::vector<SamplerRow> rows2 = {{&plain, &s2}};
  EXPECT_EQ(r.sampler.sample(in.data(), rows2)[0].token, 0);
}

TEST(SamplerChain, BannedStringPositionBans) {
  SamplingParams p;
  p.temperature = 0.0f;
  Harness r(3);
  SamplingState s(p, {});
  s.append(2);
  s.ban_at_next_position(0);  // position 1
  std::vector<float> in = {5.0f, 4.0f, 1.0f};
  EXPECT_EQ(live(r.sampler.process(in, p, s)), (std::set<int32_t>{1, 2}));
  std::vector<SamplerRow> rows = {{&p, &s}};
  EXPECT_EQ(r.sampler.sample(in.data(), rows)[0].token, 1);  // appended at position 1
  EXPECT_EQ(live(r.sampler.process(in, p, s)).size(), 3u);   // position 2: no ban
  s.rewind(1);                                               // back to position 1: the ban holds
  EXPECT_EQ(live(r.sampler.process(in, p, s)), (std::set<int32_t>{1, 2}));
  s.rewind(1);  // position 0: bans past it are forgotten
  s.append(2);
  EXPECT_EQ(live(r.sampler.process(in, p, s)).size(), 3u);
}

}  // namespace
}  // namespace cypris
