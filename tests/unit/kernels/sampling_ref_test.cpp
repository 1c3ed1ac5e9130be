// The Backend's CPU sampling op, the GPU sampler's reference (kernels/cpu/sampling.h), against the
// engine's CPU sampler (engine/sampling/sampler.h): both run the CPU's one implementation of each
// sampler (kernels/cpu/samplers.h), one over a SamplingBatch (what the GPU gets), the other over
// SamplingParams and SamplingState, so these check that the two drivers give a row the same
// distribution (support and probabilities) for top-k / top-p / min-p / temperature / penalties /
// logit_bias on small hand-made rows, the same greedy token, the same raw logprobs and the same
// Philox draw; the supports and the greedy token are also checked against values worked out by hand,
// and the draws against the distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "engine/sampling/gpu_sampling.h"
#include "engine/sampling/sampler.h"
#include "kernels/cpu/sampling.h"

namespace cypris {
namespace {

constexpr float kNegInf = -INFINITY;

// 12 tokens: a tie at 2.5 (ids 2 and 10), a masked token, negative and positive logits.
const std::vector<float> kRow = {3.0f, 1.0f, 2.5f, -1.0f, 0.5f, 2.0f, kNegInf, 1.5f, 0.0f, -2.0f, 2.5f, 1.0f};

struct Case {
  const char* name;
  SamplingParams p;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
};

SamplingParams params(float temperature, int top_k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 7;
  return p;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"plain", params(1.0f, -1, 1.0f, 0.0f), {}, {}});
  c.push_back({"top_k1", params(1.0f, 1, 1.0f, 0.0f), {}, {}});
  c.push_back({"top_k2_tie", params(1.0f, 2, 1.0f, 0.0f), {}, {}});  // 3.0, then both 2.5s
  c.push_back({"top_k5", params(0.8f, 5, 1.0f, 0.0f), {}, {}});
  c.push_back({"top_p_small", params(1.0f, -1, 0.3f, 0.0f), {}, {}});
  c.push_back({"top_p_tie", params(1.0f, -1, 0.4f, 0.0f), {}, {}});  // ends inside the 2.5 tie
  c.push_back({"top_p_0.8", params(1.0f, -1, 0.8f, 0.0f), {}, {}});
  c.push_back({"top_p_0.95_hot", params(1.7f, -1, 0.95f, 0.0f), {}, {}});
  c.push_back({"min_p", params(1.0f, -1, 1.0f, 0.2f), {}, {}});
  c.push_back({"min_p_cold", params(0.5f, -1, 1.0f, 0.05f), {}, {}});
  c.push_back({"all", params(0.9f, 6, 0.9f, 0.1f), {}, {}});
  Case pen{"penalties", params(1.0f, 8, 0.9f, 0.02f), {0, 2, 2, 5}, {0, 7, 7, 7, 3}};
  pen.p.repetition_penalty = 1.3f;
  pen.p.frequency_penalty = 0.2f;
  pen.p.presence_penalty = 0.4f;
  c.push_back(pen);
  Case bias{"bias", params(1.2f, -1, 0.85f, 0.0f), {}, {}};
  bias.p.logit_bias = {{9, 6.0f}, {0, -3.0f}, {6, 5.0f}};  // the masked token stays masked
  c.push_back(bias);
  Case both{"bias_and_penalties", params(0.7f, 4, 1.0f, 0.0f), {1, 11}, {9, 9}};
  both.p.logit_bias = {{9, 4.5f}};
  both.p.repetition_penalty = 0.8f;  // < 1 rewards repeats
  both.p.frequency_penalty = -0.1f;
  c.push_back(both);
  Case greedy{"greedy_penalised", params(0.0f, -1, 1.0f, 0.0f), {0}, {0, 0}};
  greedy.p.repetition_penalty = 2.0f;
  greedy.p.frequency_penalty = 0.5f;
  c.push_back(greedy);
  return c;
}

struct Built {
  SamplingState state;
  std::vector<SamplerRow> rows;
  GpuSamplingInputs in;
};

void build(const Case& c, Built& b) {
  b.state = SamplingState(c.p, c.prompt);
  for (int32_t t : c.output) b.state.append(t);
  b.rows = {SamplerRow{&c.p, &b.state}};
  b.in = build_gpu_sampling_inputs(b.rows, 5);
}

TEST(SamplingReference, SameDistributionAsTheEngineSampler) {
  const int32_t V = static_cast<int32_t>(kRow.size());
  SamplerConfig sc;
  sc.vocab_size = V;
  Sampler sampler(sc);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Built b;
    build(c, b);
    const std::vector<double> ref = sampling_probs_cpu(b.in.host_batch(kRow.data(), V, V), 0);
    const std::vector<float> cpu = sampler.probabilities(kRow, c.p, b.state);
    ASSERT_EQ(ref.size(), cpu.size());
    for (int32_t i = 0; i < V; ++i) {
      EXPECT_EQ(ref[i] > 0.0, cpu[i] > 0.0f) << "token " << i << ": support differs";
      EXPECT_NEAR(ref[i], cpu[i], 1e-6) << "token " << i;
    }
  }
}

TEST(SamplingReference, TruncationSupportByHand) {
  const int32_t V = static_cast<int32_t>(kRow.size());
  auto support = [&](const SamplingParams& p) {
    SamplingState st(p, {});
    std::vector<SamplerRow> rows = {{&p, &st}};
    const GpuSamplingInputs in = build_gpu_sampling_inputs(rows, 5);
    const std::vector<double> pr = sampling_probs_cpu(in.host_batch(kRow.data(), V, V), 0);
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < V; ++i) {
      if (pr[i] > 0.0) ids.push_back(i);
    }
    return ids;
  };
  EXPECT_EQ(support(params(1.0f, 1, 1.0f, 0.0f)), (std::vector<int32_t>{0}));
  EXPECT_EQ(support(params(1.0f, 2, 1.0f, 0.0f)), (std::vector<int32_t>{0, 2, 10}));  // ties at the k-th stay
  // the top token alone holds 0.309 of the mass, with one 2.5 0.497, with both 0.685: top_p 0.4
  // keeps 3.0 and the lower-id 2.5 only
  EXPECT_EQ(support(params(1.0f, -1, 0.25f, 0.0f)), (std::vector<int32_t>{0}));
  EXPECT_EQ(support(params(1.0f, -1, 0.4f, 0.0f)), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(support(params(1.0f, -1, 0.6f, 0.0f)), (std::vector<int32_t>{0, 2, 10}));
  // min_p 0.5: exp(x - 3) >= 0.5 <=> x >= 2.307
  EXPECT_EQ(support(params(1.0f, -1, 1.0f, 0.5f)), (std::vector<int32_t>{0, 2, 10}));
  EXPECT_EQ(support(params(1.0f, -1, 1.0f, 0.0f)).size(), 11u);  // all but the masked token
}

TEST(SamplingReference, GreedyIsTheArgmaxAfterPenalties) {
  for (const Case& c : cases()) {
    if (c.p.temperature != 0.0f) continue;
    Built b;
    build(c, b);
    const int32_t V = static_cast<int32_t>(kRow.size());
    GpuSamplingOutputs out;
    out.resize(1, b.in.max_top);
    sample_rows_cpu(b.in.host_batch(kRow.data(), V, V), out.results());
    // token 0 (3.0) in the prompt and twice in the output: 3.0 / 2 - 0.5 * 2 = 0.5; the first 2.5 wins
    EXPECT_EQ(out.tokens[0], 2);
  }
}

TEST(SamplingReference, DrawsFollowTheDistribution) {
  const int32_t V = static_cast<int32_t>(kRow.size());
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Built b;
    build(c, b);
    const std::vector<double> probs = sampling_probs_cpu(b.in.host_batch(kRow.data(), V, V), 0);
    std::map<int32_t, double> freq;
    constexpr int kDraws = 20000;
    GpuSamplingOutputs out;
    out.resize(1, b.in.max_top);
    for (int i = 0; i < kDraws; ++i) {
      b.in.params[0].position = static_cast<uint64_t>(i);
      sample_rows_cpu(b.in.host_batch(kRow.data(), V, V), out.results());
      freq[out.tokens[0]] += 1.0 / kDraws;
    }
    for (int32_t i = 0; i < V; ++i) {
      EXPECT_NEAR(freq[i], probs[i], 0.015) << "token " << i;
      if (probs[i] == 0.0) EXPECT_EQ(freq[i], 0.0) << "token " << i << " is outside the support";
    }
  }
}

// The engine's CPU sampler draws from the same Philox stream (key from the seed, counter = output
// position) in the same vocabulary order as the GPU sampler, whose reference this is: for every
// seed, the same token. This is what lets the engine sample each row on either device.
TEST(SamplingReference, SameTokensAsTheEngineSamplerForEverySeed) {
  const int32_t V = static_cast<int32_t>(kRow.size());
  SamplerConfig sc;
  sc.vocab_size = V;
  Sampler sampler(sc);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::map<int32_t, int> seen;
    size_t support = 0;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      Case cs = c;
      cs.p.seed = seed;
      Built b;
      build(cs, b);
      GpuSamplingOutputs out;
      out.resize(1, b.in.max_top);
      sample_rows_cpu(b.in.host_batch(kRow.data(), V, V), out.results());
      if (seed == 0) {
        for (double q : sampling_probs_cpu(b.in.host_batch(kRow.data(), V, V), 0)) support += q > 0.0;
      }
      const std::vector<SampleOutput> got = sampler.sample(kRow.data(), b.rows);
      ASSERT_EQ(got[0].token, out.tokens[0]) << "seed " << seed;
      seen[got[0].token]++;
    }
    // Drawn, not forced: with more than one token in the support, the seeds pick different ones.
    EXPECT_GE(seen.size(), std::min<size_t>(support, 2));
  }
}

TEST(SamplingReference, LogprobsOfTheRawLogits) {
  const int32_t V = static_cast<int32_t>(kRow.size());
  SamplingParams p = params(1.0f, 3, 0.9f, 0.0f);
  p.logprobs = 4;
  p.logit_bias = {{3, 2.0f}};  // processing must not change the logprobs
  SamplingState st(p, {});
  std::vector<SamplerRow> rows = {{&p, &st}};
  GpuSamplingInputs in = build_gpu_sampling_inputs(rows, 5);
  ASSERT_EQ(in.max_top, 4);
  GpuSamplingOutputs out;
  out.resize(1, in.max_top);
  for (uint64_t pos = 0; pos < 50; ++pos) {
    in.params[0].position = pos;
    sample_rows_cpu(in.host_batch(kRow.data(), V, V), out.results());
    const SampleOutput want = token_logprobs(kRow, out.tokens[0], 4);
    EXPECT_NEAR(out.logprobs[0], want.logprob, 1e-6);
    EXPECT_EQ(out.ranks[0], want.rank);
    ASSERT_EQ(want.top_logprobs.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(out.top_ids[k], want.top_logprobs[k].token_id) << k;
      EXPECT_NEAR(out.top_logprobs[k], want.top_logprobs[k].logprob, 1e-6) << k;
    }
  }
}

TEST(SamplingReference, ARowDoesNotDependOnItsBatch) {
  const int32_t V = static_cast<int32_t>(kRow.size());
  SamplingParams p = params(1.3f, -1, 0.95f, 0.0f);
  SamplingParams q = params(0.6f, 4, 1.0f, 0.1f);
  q.repetition_penalty = 1.5f;
  SamplingState a(p, {1, 2}), other(q, {0, 0, 4});
  std::vector<SamplerRow> alone = {{&p, &a}};
  std::vector<SamplerRow> mixed = {{&q, &other}, {&p, &a}, {&q, &other}};
  std::vector<float> logits3;
  for (int i = 0; i < 3; ++i) logits3.insert(logits3.end(), kRow.begin(), kRow.end());
  for (uint64_t pos = 0; pos < 30; ++pos) {
    GpuSamplingInputs i1 = build_gpu_sampling_inputs(alone, 5), i3 = build_gpu_sampling_inputs(mixed, 5);
    i1.params[0].position = i3.params[1].position = pos;
    GpuSamplingOutputs o1, o3;
    o1.resize(1, 0);
    o3.resize(3, 0);
    sample_rows_cpu(i1.host_batch(kRow.data(), V, V), o1.results());
    sample_rows_cpu(i3.host_batch(logits3.data(), V, V), o3.results());
    EXPECT_EQ(o1.tokens[0], o3.tokens[1]) << pos;
  }
}

}  // namespace
}  // namespace cypris
