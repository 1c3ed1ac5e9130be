// Test support for the engine equivalence tests (CPU, tensor-parallel and GPU): a set of greedy
// jobs with mixed prompt lengths and staggered arrivals, run batched through one Engine or one at
// a time, collecting each job's generated ids; the configurations the batch runs under; the suite
// that runs the jobs alone once; stories260k's known greedy story.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/config/engine_config.h"
#include "engine/core/engine.h"

namespace cypris::testing_support {

struct Job {
  std::string id;
  std::vector<int32_t> prompt;  // starts with BOS (1)
  int max_tokens = 0;
  int submit_step = 0;  // the engine step before which the job is submitted
};

using Outputs = std::map<std::string, std::vector<int32_t>>;

// stories260k (fp32 weights, 2 threads, small CPU KV cache, quiet logs), without prefix caching
// and chunked prefill (on by default since issue #32).
EngineConfig stories_config(int tensor_parallel_size = 1, const std::string& device = "cpu");

// count jobs with prompts of 1 to 400 tokens (every length bucket appears) and up to 40 output
// tokens within stories260k's 512-token context; shared_prefix_len > 0 starts every prompt with
// the same tokens after BOS.
std::vector<Job> make_jobs(int count, uint32_t seed, int shared_prefix_len = 0);

// make_jobs with prompts cut to max_prompt tokens and min_tokens + (prompt length % spread) output
// tokens: outputs long enough for stories260k to repeat itself (speculative-decoding tests).
std::vector<Job> make_long_jobs(int count, uint32_t seed, int max_prompt, int min_tokens, int spread);

// Greedy, ignore_eos, exactly max_tokens tokens.
GenerateRequest make_greedy_request(const Job& job);

// Runs the jobs through engine, each submitted at its step; fails the test on an error output or
// when the engine does not finish.
Outputs run_batched(Engine& engine, const std::vector<Job>& jobs);

// Each job alone on a fresh engine built from cfg.
Outputs run_solo(const EngineConfig& cfg, const std::vector<Job>& jobs);

// Submits the requests up front and steps the engine until all finish; the generated ids per request
// id. Fails the test on an error output.
Outputs run_requests(Engine& engine, const std::vector<GenerateRequest>& reqs);

// The requests of the seeded-sampling tests: a seeded request (temperature 1, top_p 0.9, seed 42,
// ignore_eos, 32 tokens) on the prompt of job, and batch-mates that take other sampler paths: a DRY
// request and a prompt-logprobs request.
GenerateRequest make_seeded_request(const Job& job, const std::string& id = "seeded");
GenerateRequest make_dry_request(const Job& job, const std::string& id = "dry");
GenerateRequest make_prompt_logprobs_request(const Job& job, const std::string& id = "prompt-logprobs");

// Every job got exactly max_tokens tokens, the same as in expected (its solo run).
void expect_same_outputs(const std::vector<Job>& jobs, const Outputs& expected, const Outputs& got);

// cfg changed so that the jobs' batch exercises one mechanism: long prompts split over several
// steps (a 64-token budget, 16 sequences); preemption of running requests, by recompute or by swap
// (40 KV blocks, 640 tokens: far less than the batch wants).
EngineConfig with_chunked_prefill(EngineConfig cfg);
EngineConfig with_preemption(EngineConfig cfg, const std::string& mode);

// A suite whose tests run a batch of jobs and compare it with the jobs run one at a time, which the
// suite does once: Derived gives `static EngineConfig solo_config()` and may hide kJobs and
// available() (false: no set-up; the tests skip themselves).
template <class Derived>
class EquivalenceSuite : public ::testing::Test {
 protected:
  static constexpr int kJobs = 64;
  static bool available() { return true; }
  static void SetUpTestSuite() {
    if (!Derived::available()) return;
    jobs_ = new std::vector<Job>(make_jobs(Derived::kJobs, 1234));
    solo_ = new Outputs(run_solo(Derived::solo_config(), *jobs_));
  }
  static void TearDownTestSuite() {
    delete jobs_;
    delete solo_;
    jobs_ = nullptr;
    solo_ = nullptr;
  }
  // The jobs batched through engine give their solo outputs.
  void expect_batch_like_solo(Engine& engine) { expect_same_outputs(*jobs_, *solo_, run_batched(engine, *jobs_)); }
  static inline std::vector<Job>* jobs_ = nullptr;
  static inline Outputs* solo_ = nullptr;
};

// The text of stories260k's greedy continuation of BOS, 200 tokens (ignore_eos), on engine; and
// the known answer (testdata's expected_greedy_200_from_bos.txt).
std::string greedy_story(Engine& engine);
std::string expected_greedy_story();

}  // namespace cypris::testing_support
