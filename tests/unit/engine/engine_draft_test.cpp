// Speculative decoding with a draft model (--speculative-model PATH) through the whole engine:
// greedy outputs equal the target's alone, batched, with chunked prefill and prefix caching and
// after preemption; a model drafting for itself has its drafts accepted, its quantized GGUF partly,
// a random model with the same vocabulary hardly (and its draft length shrinks); sampled outputs keep
// the target's distribution (a chi-square between runs with and without the draft over many seeds);
// typical acceptance keeps greedy outputs and accepts more; a target at -tp 2 with an unsharded or a
// tensor-parallel draft keeps greedy outputs; drafts with another vocabulary and unsupported draft
// settings are refused by name.
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

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace testing_support;

std::string fixture(const std::string& name) {
  return std::string(CYPRIS_FIXTURES_DIR) + "/models/" + name;
}
std::string stories_dir() {
  return std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
}
std::string gguf(const std::string& name) {
  return std::string(CYPRIS_TESTDATA_DIR) + "/gguf/" + name;
}

EngineConfig with_draft(EngineConfig cfg, const std::string& draft, int k) {
  cfg.spec.speculative_model = draft;
  cfg.spec.num_speculative_tokens = k;
  return cfg;
}

EngineConfig fixture_config(const std::string& name) {
  EngineConfig cfg = stories_config();
  cfg.model.model = fixture(name);
  cfg.model.skip_tokenizer_init = true;
  return cfg;
}

// Greedy jobs on stories260k whose outputs are long enough to draft a lot.
std::vector<Job> long_jobs(int count, uint32_t seed) { return make_long_jobs(count, seed, 160, 30, 50); }

struct SpecTotals {
  int64_t drafted, accepted, verifications;
  double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double mean_draft_length() const { return verifications ? double(drafted) / double(verifications) : 0.0; }
};
SpecTotals totals(const Engine& e) {
  const EngineStats s = e.stats();
  EXPECT_TRUE(s.spec_decode);
  return {s.spec_draft_tokens_total, s.spec_accepted_tokens_total,
          s.spec_max_emitted_tokens_total - s.spec_draft_tokens_total};
}

// Fixture prompts (vocabulary 64) for greedy comparisons.
std::vector<GenerateRequest> fixture_requests(int max_len = 64) {
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6},
                                                     {1, 9, 9, 9, 9},
                                                     {1, 20, 31, 42, 20, 31},
                                                     {3, 40, 41, 50, 52, 60, 11, 2},
                                                     {1, 33, 12, 7, 59, 44, 18, 27, 3, 3, 61, 30, 14}};
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_len - static_cast<int>(prompts[i].size());
    p.ignore_eos = true;
    reqs.push_back(make_request("f" + std::to_string(i), prompts[i], p));
  }
  return reqs;
}

class DraftGreedy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    jobs_ = new std::vector<Job>(long_jobs(8, 91));
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
std::vector<Job>* DraftGreedy::jobs_ = nullptr;
Outputs* DraftGreedy::want_ = nullptr;

TEST_F(DraftGreedy, SelfDraftEqualsWithoutSpeculationAndIsAccepted) {
  // stories260k drafting for itself: the draft's greedy token is the target's, so (up to fp32
  // rounding between a one-token decode and a multi-token verification) every draft is kept.
  Engine engine(with_draft(stories_config(), stories_dir(), 4));
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  const SpecTotals t = totals(engine);
  EXPECT_GT(t.drafted, 100);
  EXPECT_GT(t.acceptance(), 0.97) << t.accepted << " of " << t.drafted;
}

TEST_F(DraftGreedy, ChunkedPrefillPrefixCachingAndPreemptionKeepOutputs) {
  EngineConfig cfg = with_draft(stories_config(), stories_dir(), 3);
  cfg.scheduler.enable_chunked_prefill = true;
  cfg.scheduler.max_num_batched_tokens = 48;  // the draft's catch-up is split into forwards of 48 tokens too
  cfg.scheduler.max_num_seqs = 8;
  cfg.cache.enable_prefix_caching = true;
  {
    Engine engine(cfg);
    expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
    expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));  // prompts now hit the prefix cache
    EXPECT_GT(totals(engine).accepted, 0);
  }
  EngineConfig pre = with_draft(stories_config(), stories_dir(), 3);
  pre.cache.num_gpu_blocks_override = 40;  // far less than the batch wants: the target preempts
  pre.scheduler.preemption_mode = "recompute";
  Engine engine(pre);
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
  EXPECT_GT(totals(engine).accepted, 0);
}

TEST_F(DraftGreedy, DraftsBesideATensorParallelTargetKeepOutputs) {
  // The target at -tp 2 (two thread ranks) drafted by itself unsharded and tensor-parallel over two
  // ranks of its own (--speculative-draft-tensor-parallel-size 2, also what leaving the flag out
  // gives): greedy outputs are those without speculation, and the tp-2 draft's tokens are the
  // target's as the unsharded draft's are.
  for (int draft_tp : {1, 2}) {
    EngineConfig cfg = with_draft(stories_config(2), stories_dir(), 4);
    cfg.spec.speculative_draft_tensor_parallel_size = draft_tp;
    Engine engine(cfg);
    expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
    const SpecTotals t = totals(engine);
    EXPECT_GT(t.drafted, 100) << "draft tp " << draft_tp;
    EXPECT_GT(t.acceptance(), 0.97) << "draft tp " << draft_tp << ": " << t.accepted << " of " << t.drafted;
  }
}

TEST_F(DraftGreedy, AQuantizedGgufDraftIsPartlyAcceptedAndChangesNoToken) {
  // stories260k's Q4_0 GGUF (llama.cpp's quantizer) drafting for the fp32 model: it departs from the
  // target's greedy text now and then, so verification both keeps and rejects drafts.
  Engine engine(with_draft(stories_config(), gguf("stories260k-Q4_0.gguf"), 4));
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  const SpecTotals t = totals(engine);
  EXPECT_GT(t.accepted, t.drafted / 4);
  EXPECT_LT(t.accepted, t.drafted);
}

TEST_F(DraftGreedy, ARandomDraftShrinksTheDraftLengthAndChangesNoToken) {
  // A random-weight model with stories260k's vocabulary: its drafts are almost always rejected, so
  // each sequence's draft length falls to 1 (adaptive k) and then pauses; outputs stay the target's.
  Engine engine(with_draft(stories_config(), gguf("tiny-random-Q8_0.gguf"), 4));
  expect_same_outputs(*jobs_, *want_, run_batched(engine, *jobs_));
  const SpecTotals t = totals(engine);
  EXPECT_GT(t.verifications, 0);
  EXPECT_LT(t.mean_draft_length(), 2.0) << t.drafted << " drafts in " << t.verifications << " verifications";
  // The same jobs with a good draft keep (nearly) the full length.
  Engine good(with_draft(stories_config(), stories_dir(), 4));
  run_batched(good, *jobs_);
  EXPECT_GT(totals(good).mean_draft_length(), 3.5);
}

TEST(DraftFixtures, AFixtureDraftingForItselfKeepsEveryGreedyToken) {
  // Tiny random-weight Llama (vocabulary 64) drafting for itself.
  const auto reqs = fixture_requests();
  Engine plain(fixture_config("llama_gqa_tied"));
  const Outputs want = run_requests(plain, reqs);
  Engine self(with_draft(fixture_config("llama_gqa_tied"), fixture("llama_gqa_tied"), 4));
  const Outputs same = run_requests(self, reqs);
  for (const auto& r : reqs) EXPECT_EQ(same.at(r.request_id), want.at(r.request_id)) << r.request_id;
  EXPECT_GT(totals(self).acceptance(), 0.95);
}

TEST(DraftFixtures, TensorParallelDraftsKeepEveryGreedyToken) {
  // The Llama fixture at -tp 2 drafted by itself (tp 2), by its bfloat16 copy (tp 2 and unsharded)
  // and by another fixture with its vocabulary whose drafts are rejected (tp 2): the greedy tokens
  // of the fixture alone.
  const auto reqs = fixture_requests();
  Engine plain(fixture_config("llama_gqa_tied"));
  const Outputs want = run_requests(plain, reqs);
  for (const auto& [draft, draft_tp] : std::vector<std::pair<std::string, int>>{
           {"llama_gqa_tied", 2}, {"llama_gqa_tied_bf16", 2}, {"llama_gqa_tied_bf16", 1}, {"llama_linear", 2}}) {
    EngineConfig cfg = with_draft(fixture_config("llama_gqa_tied"), fixture(draft), 3);
    cfg.parallel.tensor_parallel_size = 2;
    cfg.spec.speculative_draft_tensor_parallel_size = draft_tp;
    Engine spec(cfg);
    const Outputs got = run_requests(spec, reqs);
    for (const auto& r : reqs) EXPECT_EQ(got.at(r.request_id), want.at(r.request_id)) << draft << " tp " << draft_tp;
    const SpecTotals t = totals(spec);
    EXPECT_GT(t.drafted, 0) << draft << " tp " << draft_tp;
    if (draft != "llama_linear") EXPECT_GT(t.acceptance(), 0.8) << draft << " tp " << draft_tp;
  }
}

TEST(DraftSampled, VerifiedTokensKeepTheTargetDistributionOverSeeds) {
  // stories260k at temperature 1 (top-p 0.9 in half the requests) drafted by a random-weight model
  // with its vocabulary: q is far from p, so most drafts are rejected and the residual max(0, p - q)
  // decides the token. Output positions 1 and 2 are verified positions (position 0 comes with the
  // prompt); over many seeds their tokens must have the distribution they have without the draft.
  // Accepting a drawn draft outright, or resampling from p instead of the residual, shows here.
  const std::vector<int32_t> prompt = {1, 403, 261, 340, 385, 261, 442, 270, 300};
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 1000; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    if (seed % 2) p.top_p = 0.9f;
    p.seed = seed;
    p.max_tokens = 4;  // the decode after the prompt drafts positions 1 and 2
    p.ignore_eos = true;
    reqs.push_back(make_request("s" + std::to_string(seed), prompt, p));
  }
  EngineConfig cfg = stories_config();
  cfg.scheduler.max_num_seqs = 256;
  Engine plain(cfg);
  const Outputs want = run_requests(plain, reqs);
  Engine spec(with_draft(cfg, gguf("tiny-random-Q8_0.gguf"), 2));
  const Outputs got = run_requests(spec, reqs);
  const SpecTotals t = totals(spec);
  EXPECT_GT(t.drafted, 1500);
  EXPECT_GT(t.accepted, 0);
  EXPECT_LT(t.acceptance(), 0.5) << "the draft agrees too well to test the residual";
  test::expect_same_distribution_at(got, want, {1, 2}, 4, 4);
}

TEST(DraftSampled, LogprobsAreTheTargetsForTheEmittedTokens) {
  // A random draft at temperature 1: most verified positions emit a residual draw, not the token the
  // row's own sampler drew, so their logprobs are recomputed from the target's logits. Checked
  // against the target alone: the same text fed back as a prompt, with its prompt logprobs.
  const std::vector<int32_t> prompt = {1, 403, 261, 340, 385, 261, 442, 270, 300};
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 16; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 10;
    p.ignore_eos = true;
    p.logprobs = 2;
    reqs.push_back(make_request("l" + std::to_string(seed), prompt, p));
  }
  Engine spec(with_draft(stories_config(), gguf("tiny-random-Q8_0.gguf"), 3));
  const auto got = run_full(spec, reqs);
  EXPECT_GT(totals(spec).verifications, 16);
  std::vector<GenerateRequest> replays;
  for (const auto& r : reqs) {
    const FullResult& f = got.at(r.request_id);
    ASSERT_EQ(f.tokens.size(), 10u);
    ASSERT_EQ(f.logprobs.size(), 10u);
    std::vector<int32_t> text = prompt;
    text.insert(text.end(), f.tokens.begin(), f.tokens.end());
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 1;
    p.prompt_logprobs = 2;
    replays.push_back(make_request(r.request_id, text, p));
  }
  Engine plain(stories_config());
  const auto want = run_full(plain, replays);
  for (const auto& r : reqs) {
    const FullResult& g = got.at(r.request_id);
    const FullResult& w = want.at(r.request_id);
    ASSERT_EQ(w.prompt_logprobs.size(), prompt.size() - 1 + 10);
    for (size_t i = 0; i < 10; ++i) {
      const PositionLogprobs& a = g.logprobs[i];
      const PositionLogprobs& b = w.prompt_logprobs[prompt.size() - 1 + i];
      EXPECT_EQ(a.token_id, g.tokens[i]);
      EXPECT_EQ(a.token_id, b.token_id);
      EXPECT_NEAR(a.logprob, b.logprob, 1e-4) << r.request_id << " position " << i;
      EXPECT_EQ(a.rank, b.rank) << r.request_id << " position " << i;
      ASSERT_EQ(a.top.size(), 2u);
      ASSERT_EQ(b.top.size(), 2u);
      for (size_t t = 0; t < 2; ++t) EXPECT_NEAR(a.top[t].logprob, b.top[t].logprob, 1e-4);
    }
  }
}

TEST_F(DraftGreedy, TypicalAcceptanceKeepsGreedyOutputs) {
  // Greedy rows keep exactly the target's argmax under typical acceptance, with either proposer.
  EngineConfig cfg = with_draft(stories_config(), gguf("stories260k-Q4_0.gguf"), 3);
  cfg.spec.spec_decoding_acceptance_method = "typical_acceptance_sampler";
  Engine spec(cfg);
  expect_same_outputs(*jobs_, *want_, run_batched(spec, *jobs_));
  EXPECT_GT(totals(spec).accepted, 0);
  EngineConfig ng = stories_config();
  ng.spec.speculative_model = "[ngram]";
  ng.spec.num_speculative_tokens = 3;
  ng.spec.ngram_prompt_lookup_max = 3;
  ng.spec.spec_decoding_acceptance_method = "typical_acceptance_sampler";
  Engine lookup(ng);
  expect_same_outputs(*jobs_, *want_, run_batched(lookup, *jobs_));
  EXPECT_GT(totals(lookup).accepted, 0);
}

TEST(DraftSampled, TypicalAcceptanceKeepsMoreLookupDraftsThanRejectionSampling) {
  // Prompt lookup at temperature 1 on stories260k's own (repetitive) text: rejection sampling keeps
  // a point-mass draft d with probability p(d), typical acceptance whenever p(d) clears the bar, so
  // it keeps more. The prompt is the model's greedy story, so lookup finds guesses.
  Engine greedy(stories_config());
  SamplingParams g;
  g.temperature = 0.0f;
  g.max_tokens = 60;
  g.ignore_eos = true;
  std::vector<int32_t> prompt = {1};
  const auto story = run_requests(greedy, {make_request("story", prompt, g)}).at("story");
  prompt.insert(prompt.end(), story.begin(), story.end());
  std::vector<GenerateRequest> reqs;
  for (int seed = 0; seed < 40; ++seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_tokens = 24;
    p.ignore_eos = true;
    reqs.push_back(make_request("t" + std::to_string(seed), prompt, p));
  }
  EngineConfig cfg = stories_config();
  cfg.spec.speculative_model = "[ngram]";
  cfg.spec.num_speculative_tokens = 3;
  cfg.spec.ngram_prompt_lookup_max = 3;
  Engine rejection(cfg);
  run_requests(rejection, reqs);
  cfg.spec.spec_decoding_acceptance_method = "typical_acceptance_sampler";
  Engine typical(cfg);
  run_requests(typical, reqs);
  EXPECT_GT(totals(rejection).drafted, 100);
  EXPECT_GT(totals(typical).acceptance(), totals(rejection).acceptance() + 0.05)
      << totals(typical).acceptance() << " vs " << totals(rejection).acceptance();
}

TEST(DraftConfig, RefusedSettingsNameTheFlagAndBothModels) {
  auto error_of = [](const EngineConfig& cfg) {
    try {
      Engine e(cfg);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // stories260k (512 tokens) drafted by a 64-token fixture.
  EngineConfig cfg = with_draft(stories_config(), fixture("llama_linear"), 3);
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--speculative-model"), HasSubstr("llama_linear"),
                                   HasSubstr("stories260k"), HasSubstr("vocabulary")));
  // The draft's tensor-parallel size: 1 or the target's (vLLM's rule), 1 under MPI processes.
  cfg = with_draft(stories_config(), stories_dir(), 3);
  cfg.spec.speculative_draft_tensor_parallel_size = 2;
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--speculative-draft-tensor-parallel-size 2"), HasSubstr("allowed: 1"),
                                   HasSubstr("--tensor-parallel-size 1")));
  cfg = with_draft(stories_config(2), stories_dir(), 3);
  cfg.spec.speculative_draft_tensor_parallel_size = 4;
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--speculative-draft-tensor-parallel-size 4"), HasSubstr("1 or 2")));
  cfg = with_draft(stories_config(2), stories_dir(), 3);
  cfg.spec.speculative_draft_tensor_parallel_size = 2;
  cfg.parallel.distributed_executor_backend = "mpi";
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--speculative-draft-tensor-parallel-size 2"),
                                   HasSubstr("--distributed-executor-backend mpi"), HasSubstr("process 0")));
  cfg = stories_config();
  cfg.spec.speculative_model = "[ngram]";
  cfg.spec.num_speculative_tokens = 3;
  cfg.spec.ngram_prompt_lookup_max = 3;
  cfg.spec.speculative_draft_tensor_parallel_size = 2;
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--speculative-draft-tensor-parallel-size 2"), HasSubstr("[ngram]")));
  cfg = with_draft(stories_config(), stories_dir(), 3);
  cfg.spec.ngram_prompt_lookup_max = 3;
  EXPECT_THAT(error_of(cfg), HasSubstr("--ngram-prompt-lookup-max"));
  cfg = with_draft(stories_config(), "/nonexistent/draft-model", 3);
  EXPECT_THAT(error_of(cfg), AllOf(HasSubstr("--speculative-model"), HasSubstr("/nonexistent/draft-model")));
  cfg = with_draft(stories_config(), stories_dir(), 3);
  cfg.spec.num_speculative_tokens.reset();
  EXPECT_THAT(error_of(cfg), HasSubstr("--num-speculative-tokens"));
  cfg = with_draft(stories_config(), stories_dir(), 3);
  cfg.spec.typical_acceptance_sampler_posterior_alpha = -0.5;
  EXPECT_THAT(error_of(cfg), HasSubstr("--typical-acceptance-sampler-posterior-alpha"));
}

TEST(DraftConfig, TheDraftsContextLimitStopsDraftingNotTheRequest) {
  // --speculative-max-model-len 24: prompts longer than that decode without drafts, shorter ones
  // draft until they reach it; outputs are the target's either way.
  EngineConfig cfg = with_draft(fixture_config("llama_gqa_tied"), fixture("llama_gqa_tied"), 3);
  cfg.spec.speculative_max_model_len = 24;
  const auto reqs = fixture_requests();
  Engine plain(fixture_config("llama_gqa_tied"));
  const Outputs want = run_requests(plain, reqs);
  Engine spec(cfg);
  const Outputs got = run_requests(spec, reqs);
  for (const auto& r : reqs) EXPECT_EQ(got.at(r.request_id), want.at(r.request_id)) << r.request_id;
  const SpecTotals t = totals(spec);
  EXPECT_GT(t.drafted, 0);
  // Each request drafts only while its length + drafts stays within 24 tokens (of 64).
  Engine unlimited(with_draft(fixture_config("llama_gqa_tied"), fixture("llama_gqa_tied"), 3));
  run_requests(unlimited, reqs);
  EXPECT_LT(t.drafted * 2, totals(unlimited).drafted);
}

}  // namespace
}  // namespace cypris
