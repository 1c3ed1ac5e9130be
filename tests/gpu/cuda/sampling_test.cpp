// The GPU sampler (kernels/cuda/sampling.h) against its CPU reference (kernels/cpu/sampling.h) on
// fresh random inputs with the outputs poisoned first: the same tokens (the same Philox uniform
// picks the same token) and logprobs within 1e-5, small and large (128k vocab, 256 rows) batches,
// rows full of ties; a row's token does not depend on its batch; and the engine's greedy outputs on
// stories260k are the same with GPU sampling on and off. Skips itself without a GPU.
#include "kernels/cpu/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/cuda/gpu_test_util.h"

#ifdef CYPRIS_HAVE_CUDA
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/core/engine.h"
#include "engine/request/sampling_params.h"
#include "kernels/cuda/sampling.h"
#include "tests/support/engine_jobs.h"
#endif

namespace cypris {
namespace {

CYPRIS_SKIPPED_WITHOUT_CUDA(CudaSampling)
#ifdef CYPRIS_HAVE_CUDA

using gpu_test::DevBuf;

struct HostBatch {
  int32_t rows = 0, vocab = 0, max_top = 0;
  std::vector<float> logits;
  std::vector<SamplingRowParams> params;
  std::vector<int32_t> hist_offsets{0}, hist_ids, bias_offsets{0}, bias_ids;
  std::vector<float> bias_values;

  SamplingBatch view() const {
    SamplingBatch b;
    b.logits = logits.data();
    b.ld = vocab;
    b.rows = rows;
    b.vocab = vocab;
    b.params = params.data();
    b.hist_offsets = hist_offsets.data();
    b.hist_ids = hist_ids.data();
    b.bias_offsets = bias_offsets.data();
    b.bias_ids = bias_ids.data();
    b.bias_values = bias_values.data();
    b.max_top = max_top;
    return b;
  }
};

// Random rows mixing every parameter; tie_step > 0 rounds the logits to multiples of it (ties).
HostBatch random_batch(int32_t rows, int32_t vocab, uint32_t seed, float tie_step = 0.0f) {
  HostBatch h;
  h.rows = rows;
  h.vocab = vocab;
  h.max_top = 8;
  std::mt19937 g(seed);
  h.logits = gpu_test::randn(static_cast<size_t>(rows) * vocab, seed + 1, 3.0f);
  if (tie_step > 0.0f) {
    for (float& v : h.logits) v = std::round(v / tie_step) * tie_step;
  }
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  auto one_of = [&](std::initializer_list<float> vs) { return *(vs.begin() + pick(g) % vs.size()); };
  for (int32_t r = 0; r < rows; ++r) {
    SamplingRowParams p;
    p.temperature = one_of({0.0f, 0.5f, 1.0f, 1.0f, 1.4f});
    p.top_k = static_cast<int32_t>(one_of({-1.0f, -1.0f, 1.0f, 20.0f, 1000.0f}));
    p.top_p = one_of({1.0f, 0.9f, 0.5f, 0.97f});
    p.min_p = one_of({0.0f, 0.0f, 0.05f, 0.3f});
    if (pick(g) % 2) {
      p.repetition_penalty = one_of({1.0f, 1.2f, 0.9f});
      p.frequency_penalty = one_of({0.0f, 0.3f});
      p.presence_penalty = one_of({0.0f, 0.5f, -0.2f});
      const int n = pick(g) % 300;
      p.num_prompt_ids = n > 0 ? pick(g) % n : 0;
      for (int i = 0; i < n; ++i) h.hist_ids.push_back(pick(g) % (vocab + 3) - 1);  // a few out of range
    }
    h.hist_offsets.push_back(static_cast<int32_t>(h.hist_ids.size()));
    const int nb = pick(g) % 3 == 0 ? pick(g) % 5 : 0;
    std::vector<int32_t> used;
    for (int i = 0; i < nb; ++i) {
      const int32_t id = pick(g) % vocab;
      if (std::find(used.begin(), used.end(), id) != used.end()) continue;
      used.push_back(id);
      h.bias_ids.push_back(id);
      h.bias_values.push_back(one_of({-100.0f, 2.0f, 8.0f}));
    }
    h.bias_offsets.push_back(static_cast<int32_t>(h.bias_ids.size()));
    p.want_rank = pick(g) % 2;
    p.num_top_logprobs = pick(g) % (h.max_top + 1);
    p.seed = (static_cast<uint64_t>(pick(g)) << 32) | static_cast<uint64_t>(pick(g));
    p.position = static_cast<uint64_t>(pick(g));
    h.params.push_back(p);
  }
  return h;
}

struct Results {
  std::vector<int32_t> tokens, ranks, top_ids;
  std::vector<float> logprobs, top_logprobs;
};

Results run_cpu(const HostBatch& h) {
  Results r;
  r.tokens.assign(h.rows, -7);
  r.ranks.assign(h.rows, -7);
  r.logprobs.assign(h.rows, NAN);
  r.top_ids.assign(static_cast<size_t>(h.rows) * h.max_top, -7);
  r.top_logprobs.assign(static_cast<size_t>(h.rows) * h.max_top, NAN);
  sample_rows_cpu(h.view(), SamplingResults{r.tokens.data(), r.logprobs.data(), r.ranks.data(), r.top_ids.data(),
                                            r.top_logprobs.data()});
  return r;
}

Results run_gpu(const HostBatch& h, bool check_counts_zero = true) {
  DevBuf<float> logits(h.logits);
  DevBuf<SamplingRowParams> params(h.params);
  DevBuf<int32_t> hoff(h.hist_offsets), hids(std::max<size_t>(1, h.hist_ids.size())), boff(h.bias_offsets),
      bids(std::max<size_t>(1, h.bias_ids.size()));
  DevBuf<float> bvals(std::max<size_t>(1, h.bias_values.size()));
  if (!h.hist_ids.empty()) hids.upload(h.hist_ids);
  if (!h.bias_ids.empty()) {
    bids.upload(h.bias_ids);
    bvals.upload(h.bias_values);
  }
  const size_t n = sampling_work_elements(h.rows, h.vocab);
  DevBuf<float> work(n);
  DevBuf<int32_t> counts(n);
  work.poison();
  CUDA_CHECK(cudaMemset(counts.get(), 0, n * sizeof(int32_t)));
  const size_t nt = std::max<size_t>(1, static_cast<size_t>(h.rows) * h.max_top);
  DevBuf<int32_t> tokens(h.rows), ranks(h.rows), top_ids(nt);
  DevBuf<float> logprobs(h.rows), top_lp(nt);
  tokens.poison();
  ranks.poison();
  top_ids.poison();
  logprobs.poison();
  top_lp.poison();
  SamplingBatch b = h.view();
  b.logits = logits.get();
  b.params = params.get();
  b.hist_offsets = hoff.get();
  b.hist_ids = hids.get();
  b.bias_offsets = boff.get();
  b.bias_ids = bids.get();
  b.bias_values = bvals.get();
  sample_rows_cuda(b, SamplingResults{tokens.get(), logprobs.get(), ranks.get(), top_ids.get(), top_lp.get()},
                   work.get(), counts.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (check_counts_zero) {
    const auto c = counts.download();
    EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](int32_t v) { return v == 0; })) << "penalty scratch not reset";
  }
  Results r{tokens.download(), ranks.download(), top_ids.download(), logprobs.download(), top_lp.download()};
  r.top_ids.resize(static_cast<size_t>(h.rows) * h.max_top);
  r.top_logprobs.resize(static_cast<size_t>(h.rows) * h.max_top);
  return r;
}

void expect_equal(const HostBatch& h, const Results& got, const Results& want) {
  int token_mismatches = 0;
  for (int32_t r = 0; r < h.rows; ++r) {
    if (got.tokens[r] != want.tokens[r] && ++token_mismatches <= 5) {
      ADD_FAILURE() << "row " << r << ": token " << got.tokens[r] << ", reference " << want.tokens[r];
    }
    EXPECT_NEAR(got.logprobs[r], want.logprobs[r], 1e-5) << "row " << r;
    EXPECT_EQ(got.ranks[r], want.ranks[r]) << "row " << r;
    for (int32_t k = 0; k < h.max_top; ++k) {
      const size_t i = static_cast<size_t>(r) * h.max_top + k;
      EXPECT_EQ(got.top_ids[i], want.top_ids[i]) << "row " << r << " top " << k;
      if (want.top_ids[i] >= 0) EXPECT_NEAR(got.top_logprobs[i], want.top_logprobs[i], 1e-5) << "row " << r;
    }
  }
  EXPECT_EQ(token_mismatches, 0);
}

TEST(CudaSamplingKernels, SmallBatchesMatchTheReference) {
  CYPRIS_REQUIRE_GPU();
  for (uint32_t seed : {1u, 2u, 3u}) {
    for (int32_t vocab : {7, 1000, 4099}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " vocab " << vocab);
      const HostBatch h = random_batch(37, vocab, seed * 100 + vocab);
      expect_equal(h, run_gpu(h), run_cpu(h));
    }
  }
}

TEST(CudaSamplingKernels, TiesMatchTheReference) {
  CYPRIS_REQUIRE_GPU();
  for (uint32_t seed : {5u, 6u}) {
    const HostBatch h = random_batch(64, 3000, seed, 0.5f);  // hundreds of equal logits per row
    expect_equal(h, run_gpu(h), run_cpu(h));
  }
}

TEST(CudaSamplingKernels, LargeVocabularyManyRows) {
  CYPRIS_REQUIRE_GPU();
  const HostBatch h = random_batch(256, 128 * 1024, 77);
  expect_equal(h, run_gpu(h), run_cpu(h));
}

// The Backend op the runtime calls (Backend::sample_rows): host arrays in, host results out, the
// logits on each backend's own device; CUDA and the CPU give the same tokens, ranks and logprobs,
// twice in a row on CUDA (the kept scratch is reused).
TEST(CudaSamplingKernels, BackendSampleRowsSameOnCudaAndCpu) {
  CYPRIS_REQUIRE_GPU();
  CudaBackend cuda;
  CpuBackend cpu;
  for (uint32_t seed : {11u, 12u}) {
    const HostBatch h = random_batch(40, 3001, seed);
    auto run = [&](Backend& be) {
      const DeviceTensor logits = be.upload(h.logits.data(), DType::F32, {h.rows, h.vocab});
      Results r;
      r.tokens.assign(h.rows, -7);
      r.ranks.assign(h.rows, -7);
      r.logprobs.assign(h.rows, NAN);
      r.top_ids.assign(static_cast<size_t>(h.rows) * h.max_top, -7);
      r.top_logprobs.assign(static_cast<size_t>(h.rows) * h.max_top, NAN);
      be.sample_rows(logits.view, h.view(),
                     SamplingResults{r.tokens.data(), r.logprobs.data(), r.ranks.data(), r.top_ids.data(),
                                     r.top_logprobs.data()});
      return r;
    };
    expect_equal(h, run(cuda), run(cpu));
  }
}

TEST(CudaSamplingKernels, ARowDoesNotDependOnItsBatch) {
  CYPRIS_REQUIRE_GPU();
  const HostBatch h = random_batch(50, 2048, 9);
  const Results all = run_gpu(h);
  for (int32_t r : {0, 17, 49}) {
    HostBatch one;
    one.rows = 1;
    one.vocab = h.vocab;
    one.max_top = h.max_top;
    one.logits.assign(h.logits.begin() + static_cast<size_t>(r) * h.vocab,
                      h.logits.begin() + static_cast<size_t>(r + 1) * h.vocab);
    one.params = {h.params[r]};
    one.hist_ids.assign(h.hist_ids.begin() + h.hist_offsets[r], h.hist_ids.begin() + h.hist_offsets[r + 1]);
    one.hist_offsets = {0, static_cast<int32_t>(one.hist_ids.size())};
    one.bias_ids.assign(h.bias_ids.begin() + h.bias_offsets[r], h.bias_ids.begin() + h.bias_offsets[r + 1]);
    one.bias_values.assign(h.bias_values.begin() + h.bias_offsets[r], h.bias_values.begin() + h.bias_offsets[r + 1]);
    one.bias_offsets = {0, static_cast<int32_t>(one.bias_ids.size())};
    EXPECT_EQ(run_gpu(one).tokens[0], all.tokens[r]) << "row " << r;
  }
}

TEST(CudaSamplingEngine, GreedyOutputsSameWithGpuSamplingOnAndOff) {
  CYPRIS_REQUIRE_GPU();
  using namespace testing_support;
  const auto jobs = make_jobs(16, 4321);
  EngineConfig cfg = stories_config(1, "cuda");
  cfg.cache.num_gpu_blocks_override = 2000;
  ::setenv("CYPRIS_GPU_SAMPLING", "0", 1);
  Outputs off;
  {
    Engine engine(cfg);
    off = run_batched(engine, jobs);
  }
  ::unsetenv("CYPRIS_GPU_SAMPLING");
  Engine engine(cfg);
  expect_same_outputs(jobs, off, run_batched(engine, jobs));
}
TEST(CudaSamplingEngine, SeededRequestIgnoresItsBatch) {
  CYPRIS_REQUIRE_GPU();
  using namespace testing_support;
  ::unsetenv("CYPRIS_GPU_SAMPLING");
  EngineConfig cfg = stories_config(1, "cuda");
  cfg.cache.num_gpu_blocks_override = 2000;
  const auto jobs = make_jobs(12, 99);
  GenerateRequest seeded = make_greedy_request(jobs[0]);
  seeded.request_id = "seeded";
  auto p = std::make_shared<SamplingParams>(*seeded.params);
  p->temperature = 0.9f;
  p->top_p = 0.9f;
  p->min_p = 0.02f;
  p->repetition_penalty = 1.1f;
  p->seed = 42;
  p->max_tokens = 40;
  seeded.params = p;
  std::vector<int32_t> alone;
  {
    Engine engine(cfg);
    alone = run_requests(engine, {seeded})["seeded"];
  }
  std::vector<GenerateRequest> batch;
  for (size_t i = 1; i < jobs.size(); ++i) batch.push_back(make_greedy_request(jobs[i]));
  batch.insert(batch.begin() + 5, seeded);
  Engine engine(cfg);
  const auto got = run_requests(engine, batch);
  ASSERT_EQ(alone.size(), 40u);
  EXPECT_EQ(got.at("seeded"), alone);
}
// The issue-15 guarantee on a GPU: a seeded request (temperature 1, top_p 0.9) gets the same tokens
// alone, beside a DRY request (sampled on the CPU in the same step) and beside a prompt-logprobs
// request (whose rows are downloaded), and the GPU sampler gives the tokens the CPU sampler gives
// on the same logits (CYPRIS_GPU_SAMPLING=0 sends every row to the CPU sampler).
TEST(CudaSamplingEngine, SeededRowsSameOnGpuAndCpuWhateverTheBatch) {
  CYPRIS_REQUIRE_GPU();
  using namespace testing_support;
  EngineConfig cfg = stories_config(1, "cuda");
  cfg.cache.num_gpu_blocks_override = 2000;
  const auto jobs = make_jobs(4, 2024);
  auto run = [&](const std::vector<GenerateRequest>& reqs) {
    Engine engine(cfg);
    return run_requests(engine, reqs);
  };
  ::setenv("CYPRIS_GPU_SAMPLING", "0", 1);
  const Outputs cpu_alone = run({make_seeded_request(jobs[0])});
  const Outputs cpu_dry = run({make_dry_request(jobs[1]), make_seeded_request(jobs[0])});
  ::unsetenv("CYPRIS_GPU_SAMPLING");
  const Outputs gpu_alone = run({make_seeded_request(jobs[0])});
  const Outputs gpu_dry = run({make_dry_request(jobs[1]), make_seeded_request(jobs[0])});
  const Outputs gpu_plp = run({make_seeded_request(jobs[0]), make_prompt_logprobs_request(jobs[2])});
  const Outputs gpu_mixed = run({make_dry_request(jobs[1]), make_seeded_request(jobs[0]),
                                 make_prompt_logprobs_request(jobs[2]), make_greedy_request(jobs[3])});
  const std::vector<int32_t>& want = gpu_alone.at("seeded");
  ASSERT_EQ(want.size(), 32u);
  EXPECT_EQ(cpu_alone.at("seeded"), want) << "the CPU sampler and the GPU sampler differ on a seeded row";
  EXPECT_EQ(cpu_dry.at("seeded"), want);
  EXPECT_EQ(gpu_dry.at("seeded"), want) << "a DRY batch-mate changed a seeded row";
  EXPECT_EQ(gpu_plp.at("seeded"), want) << "a prompt-logprobs batch-mate changed a seeded row";
  EXPECT_EQ(gpu_mixed.at("seeded"), want);
  // The DRY row runs on the CPU sampler either way: the same tokens with GPU sampling on and off.
  EXPECT_EQ(gpu_dry.at("dry"), cpu_dry.at("dry"));
}

#endif

}  // namespace
}  // namespace cypris
