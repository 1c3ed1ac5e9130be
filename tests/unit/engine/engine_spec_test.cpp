// Speculative decoding (prompt lookup) through the whole engine on stories260k, against the same
// engine without it: greedy outputs equal token for token alone, batched, with chunked prefill,
// prefix caching and preemption; seeded sampled outputs (temperature 1 with top-p, min-p and
// penalties) equal too, since each verified position draws from the request's Philox stream at
// that output position with the accepted drafts as history; stop strings, stop ids and max_tokens
// cut inside an accepted run exactly where they cut without speculation; logprobs are the target's.
// Every test also checks that drafts were proposed and accepted, or it would compare nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/common/error.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"
#include "tests/support/full_runs.h"
#include "tests/support/same_distribution.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;
using namespace testing_support;

EngineConfig spec_config(int k = 4, int max_n = 3) {
  EngineConfig cfg = stories_config();
  cfg.spec.speculative_model = "[ngram]";
  cfg.spec.num_speculative_tokens = k;
  cfg.spec.ngram_prompt_lookup_max = max_n;
  return cfg;
}

// Greedy jobs whose outputs are long enough for stories260k to repeat itself.
std::vector<Job> long_jobs(int count, uint32_t seed) { return make_long_jobs(count, seed, 200, 40, 60); }

class SpecGreedy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    jobs_ = new std::vector<Job>(long_jobs(12, 77));
    Engine engine(stories_config());
    want_ = new Outputs(run_batched(engine, *jobs_));
  }
  static void TearDownTestSuite() {
    delete jobs_;
    delete want_;
  }
  static std::vector<Job>* jobs_;
  static Outputs* want_;
};
std::vector<Job>* SpecGreedy::jobs_ = nullptr;
Outputs* SpecGreedy::want_ = nullptr;

TEST_F(SpecGreedy, AloneEqualsWithoutSpeculation) {
  Engine engine(spec_config());
  for (const Job& j : *jobs_) {
    Job solo = j;
    solo.submit_step = 0;
    const Outputs got = run_batched(engine, {solo});
    EXPECT_EQ(got.at(j.id), want_->at(j.id)) << j.id;
  }
  expect_speculated(engine);
}

TEST_F(SpecGreedy, BatchedEqualsWithoutSpeculation) {
  Engine engine(spec_config());
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  expect_speculated(engine);
}

TEST_F(SpecGreedy, ChunkedPrefillAndPrefixCachingKeepOutputs) {
  EngineConfig cfg = spec_config(5, 2);
  cfg.scheduler.enable_chunked_prefill = true;
  cfg.scheduler.max_num_batched_tokens = 48;  // drafts compete with prompt chunks for the budget
  cfg.scheduler.max_num_seqs = 8;
  cfg.cache.enable_prefix_caching = true;
  Engine engine(cfg);
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  // Again: the prompts now hit blocks cached from the first run, outputs included.
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  expect_speculated(engine);
}

TEST_F(SpecGreedy, PreemptionKeepsOutputs) {
  EngineConfig cfg = spec_config();
  cfg.cache.num_gpu_blocks_override = 48;  // 768 tokens: far less than the batch wants
  cfg.scheduler.preemption_mode = "recompute";
  Engine engine(cfg);
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
  expect_speculated(engine);
}

TEST_F(SpecGreedy, OffAboveTheBatchSizeLimit) {
  EngineConfig cfg = spec_config();
  cfg.spec.speculative_disable_by_batch_size = 1;
  Engine engine(cfg);
  std::vector<Job> all_at_once = *jobs_;
  for (auto& j : all_at_once) j.submit_step = 0;
  // Every step has more than one running request until the last one is alone.
  const Outputs got = run_batched(engine, all_at_once);
  expect_same_outputs(*jobs_, *want_, got);
  const EngineStats s = engine.stats();
  Engine one(spec_config());
  run_batched(one, all_at_once);
  EXPECT_LT(s.spec_draft_tokens_total, one.stats().spec_draft_tokens_total);
}

TEST(SpecFixtures, GreedyOutputsEqualWithoutSpeculation) {
  // Tiny random-weight models of other families (sliding windows, soft-capping, MoE, GQA): the
  // verified rows attend over several new tokens at once, which must give the decode's logits.
  for (const char* name : {"mistral_sliding_window", "gemma2_softcap_sliding", "qwen3_moe_top2_of_8", "llama_gqa_tied",
                           "cohere2_sliding_nope"}) {
    SCOPED_TRACE(name);
    EngineConfig cfg = stories_config();
    cfg.model.model = std::string(CYPRIS_FIXTURES_DIR) + "/models/" + name;
    cfg.model.skip_tokenizer_init = true;
    std::vector<GenerateRequest> reqs;
    const std::vector<std::vector<int32_t>> prompts = {
        {1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6}, {1, 9, 9, 9, 9}, {1, 20, 31, 42, 20, 31}, {3, 40, 41, 50, 52, 60, 11, 2}};
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto p = std::make_shared<SamplingParams>();
      p->temperature = 0.0f;
      p->max_tokens = 64 - static_cast<int>(prompts[i].size());
      p->ignore_eos = true;
      reqs.push_back(GenerateRequest{"f" + std::to_string(i), prompts[i], "", p});
    }
    Engine plain(cfg);
    const Outputs want = run_requests(plain, reqs);
    EngineConfig sc = cfg;
    sc.spec.speculative_model = "[ngram]";
    sc.spec.num_speculative_tokens = 5;
    sc.spec.ngram_prompt_lookup_max = 3;
    Engine spec(sc);
    const Outputs got = run_requests(spec, reqs);
    for (const auto& r : reqs) EXPECT_EQ(got.at(r.request_id), want.at(r.request_id)) << r.request_id;
    EXPECT_GT(spec.stats().spec_draft_tokens_total, 0);
  }
}

TEST(SpecSampled, SeededOutputsEqualWithoutSpeculation) {
  // Temperature 1 with the truncation samplers and penalties that see the history: the token at
  // each verified position is the one the request's stream draws there without speculation.
  const std::vector<Job> jobs = long_jobs(6, 5);
  std::vector<GenerateRequest> reqs;
  for (int v = 0; v < 4; ++v) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.seed = 1000 + static_cast<int>(i) + 17 * v;
      p.max_tokens = 64;
      p.ignore_eos = true;
      if (v == 1) p.top_p = 0.8f;
      if (v == 2) {
        p.min_p = 0.1f;
        p.repetition_penalty = 1.1f;
      }
      if (v == 3) {
        p.temperature = 0.7f;
        p.top_k = 20;
        p.frequency_penalty = 0.3f;
        p.presence_penalty = 0.2f;
      }
      reqs.push_back(make_request(jobs[i].id + "-v" + std::to_string(v), jobs[i].prompt, p));
    }
  }
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(spec_config(4, 2));
  const auto got = run_full(spec, reqs);
  for (const auto& r : reqs) EXPECT_EQ(got.at(r.request_id).tokens, want.at(r.request_id).tokens) << r.request_id;
  expect_speculated(spec);
}

TEST(SpecSampled, FirstTokensKeepTheTargetDistributionOverSeeds) {
  // Over many seeds the first drafted position's token has the target's distribution: a chi-square
  // between the counts with and without speculation (two samples, pooled small cells). The prompt is
  // of stories260k's own (repetitive) greedy text, so that early decode steps verify drafts.
  Engine greedy(stories_config());
  SamplingParams g;
  g.temperature = 0.0f;
  g.max_tokens = 60;
  g.ignore_eos = true;
  std::vector<int32_t> prompt = {1};
  const auto story = run_requests(greedy, {make_request("story", prompt, g)}).at("story");
  prompt.insert(prompt.end(), story.begin(), story.end());
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 240; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 3;  // room for a draft after the first token
    p.ignore_eos = true;
    reqs.push_back(make_request("s" + std::to_string(seed), prompt, p));
  }
  EngineConfig cfg = spec_config(2, 3);
  Engine spec(cfg);
  const auto got = run_full(spec, reqs);
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  expect_speculated(spec);
  // The token at output position 1 (verified).
  test::expect_same_distribution_at(tokens_of(got), tokens_of(want), {1}, 3, 3);
}

TEST(SpecInteractions, StopStringsStopIdsAndMaxTokensCutWhereTheyCutWithout) {
  const std::vector<Job> jobs = long_jobs(4, 11);
  // Greedy text without speculation, then stop strings and stop ids taken from inside it.
  std::vector<GenerateRequest> base;
  for (const Job& j : jobs) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 80;
    p.ignore_eos = true;
    base.push_back(make_request(j.id, j.prompt, p));
  }
  Engine plain0(stories_config());
  const auto full = run_full(plain0, base);
  std::vector<GenerateRequest> reqs;
  for (const Job& j : jobs) {
    const FullResult& f = full.at(j.id);
    ASSERT_GE(f.text.size(), 60u);
    for (size_t at : {20u, 35u, 50u}) {
      SamplingParams p;
      p.temperature = 0.0f;
      p.max_tokens = 80;
      p.ignore_eos = true;
      p.stop = {f.text.substr(at, 4)};
      reqs.push_back(make_request(j.id + "-str" + std::to_string(at), j.prompt, p));
      SamplingParams q = p;
      q.stop.clear();
      q.stop_token_ids = {f.tokens[at / 4 + 5]};
      reqs.push_back(make_request(j.id + "-id" + std::to_string(at), j.prompt, q));
      SamplingParams m = p;
      m.stop.clear();
      m.max_tokens = static_cast<int>(at / 3 + 2);
      reqs.push_back(make_request(j.id + "-max" + std::to_string(at), j.prompt, m));
    }
  }
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(spec_config(6, 2));
  const auto got = run_full(spec, reqs);
  for (const auto& r : reqs) {
    const FullResult& w = want.at(r.request_id);
    const FullResult& g = got.at(r.request_id);
    EXPECT_EQ(g.tokens, w.tokens) << r.request_id;
    EXPECT_EQ(g.text, w.text) << r.request_id;
    EXPECT_EQ(g.finish_reason, w.finish_reason) << r.request_id;
    EXPECT_EQ(g.stop_reason, w.stop_reason) << r.request_id;
  }
  expect_speculated(spec);
}

TEST(SpecInteractions, LogprobsAreTheTargets) {
  const std::vector<Job> jobs = long_jobs(3, 21);
  std::vector<GenerateRequest> reqs;
  for (const Job& j : jobs) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 60;
    p.ignore_eos = true;
    p.logprobs = 3;
    reqs.push_back(make_request(j.id, j.prompt, p));
  }
  Engine plain(stories_config());
  const auto want = run_full(plain, reqs);
  Engine spec(spec_config());
  const auto got = run_full(spec, reqs);
  for (const auto& r : reqs) {
    const FullResult& w = want.at(r.request_id);
    const FullResult& g = got.at(r.request_id);
    ASSERT_EQ(g.tokens, w.tokens);
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size());
    for (size_t i = 0; i < w.logprobs.size(); ++i) {
      EXPECT_EQ(g.logprobs[i].token_id, w.logprobs[i].token_id);
      EXPECT_NEAR(g.logprobs[i].logprob, w.logprobs[i].logprob, 1e-4) << r.request_id << " position " << i;
      ASSERT_EQ(g.logprobs[i].top.size(), 3u);
      for (size_t t = 0; t < 3; ++t) EXPECT_NEAR(g.logprobs[i].top[t].logprob, w.logprobs[i].top[t].logprob, 1e-4);
    }
  }
  expect_speculated(spec);
}

TEST(SpecConfig, BeamSearchIsRefusedByName) {
  Engine engine(spec_config());
  SamplingParams p;
  p.use_beam_search = true;
  p.best_of = 2;
  p.temperature = 0.0f;
  p.max_tokens = 4;
  try {
    engine.add_request(make_request("beam", {1, 300, 301}, p), std::make_shared<RequestStream>("beam"));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("use_beam_search"), HasSubstr("speculative")));
  }
}

TEST(SpecConfig, RefusedSettingsNameTheFlag) {
  auto error_of = [](EngineConfig cfg) {
    try {
      Engine e(cfg);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EngineConfig cfg = spec_config();
  cfg.spec.speculative_model = "some/draft-model";
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--speculative-model"), HasSubstr("draft model")));
  cfg.spec.speculative_model = "ibm-fms/llama-160m-accelerator-mlp_speculator";
  EXPECT_THAT(error_of(cfg), HasSubstr("mlp_speculator"));
  cfg.spec.speculative_model = "abhigoyal/vllm-medusa-llama-68m-random";
  EXPECT_THAT(error_of(cfg), HasSubstr("medusa"));
  cfg = spec_config();
  cfg.spec.ngram_prompt_lookup_max.reset();
  EXPECT_THAT(error_of(cfg), HasSubstr("--ngram-prompt-lookup-max"));
  cfg = spec_config();
  cfg.spec.num_speculative_tokens.reset();
  EXPECT_THAT(error_of(cfg), HasSubstr("--num-speculative-tokens"));
  cfg = stories_config();
  cfg.spec.num_speculative_tokens = 3;
  EXPECT_THAT(error_of(cfg), HasSubstr("--speculative-model"));
  // Lookahead slots: only with speculation, and at least one per drafted token.
  cfg = stories_config();
  cfg.scheduler.num_lookahead_slots = 4;
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--num-lookahead-slots 4"), HasSubstr("--speculative-model")));
  cfg = spec_config(5);
  cfg.scheduler.num_lookahead_slots = 3;
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--num-lookahead-slots 3"), HasSubstr("--num-speculative-tokens 5")));
  cfg.scheduler.num_lookahead_slots = 5;
  EXPECT_EQ(error_of(cfg), "");
}

TEST(SpecConfig, MoreLookaheadSlotsThanDraftsKeepOutputs) {
  // Slots past the drafts are reserved and given back each step: outputs stay the same.
  const std::vector<Job> jobs = long_jobs(6, 41);
  Engine plain(stories_config());
  const Outputs want = run_batched(plain, jobs);
  EngineConfig cfg = spec_config(3, 2);
  cfg.scheduler.num_lookahead_slots = 40;
  Engine spec(cfg);
  expect_same_outputs(jobs, want, run_batched(spec, jobs));
  expect_speculated(spec);
}

}  // namespace
}  // namespace cypris
