// Which rows the GPU sampler takes (gpu_sampling_supported) and the per-step inputs built for it:
// every parameter the GPU path lacks sends the row to the CPU sampler; the inputs carry the
// history, biases, the request's Philox stream and output position.
#include "engine/sampling/gpu_sampling.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "engine/common/error.h"

namespace cypris {
namespace {

bool supported(const SamplingParams& p, int max_log_probs = 20) {
  SamplingState st(p, {1, 2, 3});
  return gpu_sampling_supported(SamplerRow{&p, &st}, max_log_probs);
}

TEST(GpuSamplingPredicate, CommonParametersQualify) {
  SamplingParams p;
  EXPECT_TRUE(supported(p));
  p.temperature = 0.0f;
  EXPECT_TRUE(supported(p));
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.2f;
  p.logit_bias = {{5, -100.0f}};
  p.seed = 3;
  p.logprobs = 5;
  p.stop_token_ids = {7};
  EXPECT_TRUE(supported(p));
  p.sampler_priority = default_sampler_order(false);  // the default order spelled out
  EXPECT_TRUE(supported(p));
}

TEST(GpuSamplingPredicate, EveryOtherSamplerGoesToTheCpu) {
  const std::vector<std::pair<const char*, std::function<void(SamplingParams&)>>> off = {
      {"mirostat", [](SamplingParams& p) { p.mirostat_mode = 2; }},
      {"dry", [](SamplingParams& p) { p.dry_multiplier = 0.8f; }},
      {"xtc", [](SamplingParams& p) { p.xtc_probability = 0.5f; }},
      {"typical", [](SamplingParams& p) { p.typical_p = 0.9f; }},
      {"tfs", [](SamplingParams& p) { p.tfs = 0.9f; }},
      {"eta", [](SamplingParams& p) { p.eta_cutoff = 3.0f; }},
      {"epsilon", [](SamplingParams& p) { p.epsilon_cutoff = 3.0f; }},
      {"top_a", [](SamplingParams& p) { p.top_a = 0.2f; }},
      {"nsigma", [](SamplingParams& p) { p.nsigma = 1.0f; }},
      {"skew", [](SamplingParams& p) { p.skew = 0.5f; }},
      {"dynatemp", [](SamplingParams& p) { p.dynatemp_max = 2.0f; }},
      {"smoothing", [](SamplingParams& p) { p.smoothing_factor = 0.3f; }},
      {"no_repeat_ngram", [](SamplingParams& p) { p.no_repeat_ngram_size = 3; }},
      {"custom bans", [](SamplingParams& p) { p.custom_token_bans = {4}; }},
      {"allowed ids",
       [](SamplingParams& p) {
         p.allowed_token_ids = std::vector<int32_t>{1, 2};
       }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = 4; }},
      {"beam search", [](SamplingParams& p) { p.use_beam_search = true; }},
      {"temperature last with top_p",
       [](SamplingParams& p) {
         p.temperature_last = true;
         p.temperature = 0.5f;
         p.top_p = 0.9f;
       }},
      {"custom order",
       [](SamplingParams& p) {
         auto order = default_sampler_order(false);
         std::swap(order[1], order[3]);  // temperature before the penalties
         p.sampler_priority = order;
         p.temperature = 0.5f;
         p.repetition_penalty = 1.2f;
       }},
      {"too many logprobs", [](SamplingParams& p) { p.logprobs = kMaxGpuTopLogprobs + 1; }},
  };
  for (const auto& [name, set] : off) {
    SamplingParams p;
    set(p);
    EXPECT_FALSE(supported(p, 100)) << name;
  }
  SamplingParams t;
  t.temperature_last = true;  // harmless without a truncation that depends on temperature
  t.temperature = 0.5f;
  t.top_k = 10;
  EXPECT_TRUE(supported(t));
  SamplingParams o;  // a custom order that only moves samplers this request does not use
  auto order = default_sampler_order(false);
  std::swap(order[0], order[1]);  // DRY and the penalties, both off
  o.sampler_priority = order;
  o.top_p = 0.9f;
  EXPECT_TRUE(supported(o));
}

TEST(GpuSamplingPredicate, MasksAndStateSendTheRowToTheCpu) {
  SamplingParams p;
  SamplingState st(p, {1});
  EXPECT_TRUE(gpu_sampling_supported(SamplerRow{&p, &st}, 5));
  const uint32_t mask[1] = {0xffu};
  EXPECT_FALSE(gpu_sampling_supported(SamplerRow{&p, &st, mask}, 5));  // guided decoding
  st.ban_at_next_position(3);                                          // a banned string was rewound
  EXPECT_FALSE(gpu_sampling_supported(SamplerRow{&p, &st}, 5));
  SamplingParams m;
  m.min_tokens = 2;
  SamplingState sm(m, {1});
  EXPECT_FALSE(gpu_sampling_supported(SamplerRow{&m, &sm}, 5));
  sm.append(4);
  sm.append(5);  // min_tokens reached: EOS is no longer banned
  EXPECT_TRUE(gpu_sampling_supported(SamplerRow{&m, &sm}, 5));
  SamplingParams lp;
  lp.logprobs = 200;  // capped by --max-log-probs 5 -> fine
  SamplingState sl(lp, {});
  EXPECT_TRUE(gpu_sampling_supported(SamplerRow{&lp, &sl}, 5));
}

TEST(GpuSamplingInputs, FlattensHistoryBiasAndStreams) {
  SamplingParams a;  // penalties and logprobs
  a.repetition_penalty = 1.2f;
  a.seed = 11;
  a.logprobs = 30;
  SamplingParams b;  // a bias, greedy
  b.temperature = 0.0f;
  b.logit_bias = {{9, 1.5f}, {2, -1.0f}};
  SamplingState sa(a, {1, 2, 3});
  sa.append(7);
  SamplingState sb(b, {4});
  sb.append(5);
  sb.append(6);
  std::vector<SamplerRow> rows = {{&a, &sa}, {&b, &sb}};
  const GpuSamplingInputs in = build_gpu_sampling_inputs(rows, 20);
  ASSERT_EQ(in.rows(), 2);
  EXPECT_EQ(in.hist_offsets, (std::vector<int32_t>{0, 4, 4}));  // row b has no penalty: no history
  EXPECT_EQ(in.hist_ids, (std::vector<int32_t>{1, 2, 3, 7}));
  EXPECT_EQ(in.params[0].num_prompt_ids, 3);
  EXPECT_EQ(in.bias_offsets, (std::vector<int32_t>{0, 0, 2}));
  EXPECT_EQ(in.bias_ids, (std::vector<int32_t>{2, 9}));
  EXPECT_EQ(in.bias_values, (std::vector<float>{-1.0f, 1.5f}));
  EXPECT_EQ(in.max_top, 20);  // min(30, --max-log-probs 20)
  EXPECT_EQ(in.params[0].want_rank, 1);
  EXPECT_EQ(in.params[1].want_rank, 0);
  EXPECT_EQ(in.params[0].position, 1u);
  EXPECT_EQ(in.params[1].position, 2u);
  EXPECT_EQ(in.params[1].temperature, 0.0f);
  // the stream key is the request's: the same seed gives the same key, another sequence another
  SamplingState again(a, {9});
  EXPECT_EQ(in.params[0].seed, again.stream_key());
  EXPECT_NE(in.params[0].seed, SamplingState(a, {9}, 1).stream_key());
}

TEST(GpuSamplingInputs, RefusesUnsupportedRowsAndFinishAppends) {
  SamplingParams p;
  p.mirostat_mode = 2;
  SamplingState st(p, {});
  std::vector<SamplerRow> rows = {{&p, &st}};
  EXPECT_THROW(build_gpu_sampling_inputs(rows, 5), Error);

  SamplingParams q;
  q.logprobs = 2;
  SamplingState sq(q, {1});
  std::vector<SamplerRow> ok = {{&q, &sq}};
  const GpuSamplingInputs in = build_gpu_sampling_inputs(ok, 5);
  GpuSamplingOutputs out;
  out.resize(1, in.max_top);
  out.tokens[0] = 42;
  out.logprobs[0] = -0.5f;
  out.ranks[0] = 3;
  out.top_ids = {8, 42};
  out.top_logprobs = {-0.1f, -0.5f};
  const auto samples = finish_gpu_sampling(ok, in, out);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].token, 42);
  EXPECT_EQ(samples[0].rank, 3);
  ASSERT_EQ(samples[0].top_logprobs.size(), 2u);
  EXPECT_EQ(samples[0].top_logprobs[0].token_id, 8);
  EXPECT_EQ(sq.output_ids(), (std::vector<int32_t>{42}));
}

}  // namespace
}  // namespace cypris
