// A seeded request's tokens depend on its seed, prompt and parameters only: the same alone and
// beside batch-mates that take other sampler paths (DRY, which the fast path and the GPU sampler
// do not implement; prompt logprobs, which need full logits rows). On a GPU the engine sends each
// row to the GPU or the CPU sampler on its own, both drawing from the request's Philox stream
// (tests/gpu/cuda/sampling_test.cpp checks the same there, and CPU == GPU sampler tokens).
#include <gtest/gtest.h>

#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"

namespace cypris {
namespace {

using namespace testing_support;

class SeededRequest : public ::testing::Test {
 protected:
  void SetUp() override { jobs_ = make_jobs(6, 2024); }
  std::vector<int32_t> alone() {
    Engine engine(stories_config());
    return run_requests(engine, {make_seeded_request(jobs_[0])})["seeded"];
  }
  std::vector<Job> jobs_;
};

TEST_F(SeededRequest, SameTokensBesideADryRequest) {
  const std::vector<int32_t> want = alone();
  ASSERT_EQ(want.size(), 32u);
  Engine engine(stories_config());
  const Outputs got = run_requests(engine, {make_dry_request(jobs_[1]), make_seeded_request(jobs_[0])});
  EXPECT_EQ(got.at("seeded"), want);
  EXPECT_EQ(got.at("dry").size(), 24u);
}

TEST_F(SeededRequest, SameTokensBesideAPromptLogprobsRequest) {
  const std::vector<int32_t> want = alone();
  Engine engine(stories_config());
  const Outputs got = run_requests(engine, {make_seeded_request(jobs_[0]), make_prompt_logprobs_request(jobs_[2])});
  EXPECT_EQ(got.at("seeded"), want);
  EXPECT_EQ(got.at("prompt-logprobs").size(), 20u);
}

TEST_F(SeededRequest, SameTokensInAMixedBatch) {
  const std::vector<int32_t> want = alone();
  std::vector<GenerateRequest> batch = {make_dry_request(jobs_[1]), make_prompt_logprobs_request(jobs_[2])};
  for (size_t i = 3; i < jobs_.size(); ++i) batch.push_back(make_greedy_request(jobs_[i]));
  batch.insert(batch.begin() + 2, make_seeded_request(jobs_[0]));
  Engine engine(stories_config());
  EXPECT_EQ(run_requests(engine, batch).at("seeded"), want);
}

TEST_F(SeededRequest, TheSeedDecides) {
  // The comparisons above mean something only if the tokens are drawn, not forced.
  const std::vector<int32_t> want = alone();
  GenerateRequest other = make_seeded_request(jobs_[0]);
  auto p = std::make_shared<SamplingParams>(*other.params);
  p->seed = 43;
  other.params = p;
  Engine engine(stories_config());
  EXPECT_NE(run_requests(engine, {other})["seeded"], want);
}

// --seed (vLLM): requests without their own seed draw one from a generator seeded once by --seed,
// so a fresh server given the same requests in the same order answers the same; another --seed
// answers otherwise, and two equal unseeded requests on one server still differ.
TEST_F(SeededRequest, ServerSeedMakesUnseededRequestsReproducible) {
  auto unseeded = [&](const std::string& id) {
    GenerateRequest r = make_seeded_request(jobs_[0], id);
    auto p = std::make_shared<SamplingParams>(*r.params);
    p->seed.reset();
    r.params = p;
    return r;
  };
  auto serve = [&](int64_t seed) {
    EngineConfig cfg = stories_config();
    cfg.model.seed = seed;
    Engine engine(cfg);
    Outputs first = run_requests(engine, {unseeded("a")});
    Outputs second = run_requests(engine, {unseeded("b")});
    return std::make_pair(first.at("a"), second.at("b"));
  };
  const auto run1 = serve(7);
  const auto run2 = serve(7);
  EXPECT_EQ(run1, run2);
  EXPECT_NE(run1.first, run1.second);  // each request draws its own seed
  EXPECT_NE(serve(8).first, run1.first);
}

}  // namespace
}  // namespace cypris
