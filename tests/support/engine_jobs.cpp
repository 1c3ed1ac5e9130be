#include "tests/support/engine_jobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <random>

#include "engine/request/sampling_params.h"

namespace cypris::testing_support {

EngineConfig stories_config(int tensor_parallel_size, const std::string& device) {
  EngineConfig cfg;
  cfg.model.model = std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k";
  cfg.model.dtype = "float32";
  cfg.device.device = device;
  cfg.device.threads = 2;
  cfg.logging.disable_log_stats = true;
  cfg.logging.disable_log_requests = true;
  cfg.cache.cpu_kvcache_space = 0.05;
  // An fp32 cache (the CPU's default is float16): the equivalence tests compare runs whose K/V come
  // from differently shaped products (prefill vs decode, recompute, tensor-parallel slices), equal to
  // fp32 rounding, and a 16-bit cache turns such 1e-7 differences into whole 16-bit steps now and then.
  cfg.quant.kv_cache_dtype = "float32";
  cfg.parallel.tensor_parallel_size = tensor_parallel_size;
  // The plain modes (the defaults before issue #32): the equivalence tests switch prefix caching
  // and chunked prefill on where they test them, and compare with runs without them.
  cfg.cache.enable_prefix_caching = false;
  cfg.scheduler.enable_chunked_prefill = false;
  return cfg;
}

std::vector<Job> make_jobs(int count, uint32_t seed, int shared_prefix_len) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prefix;
  for (int i = 0; i < shared_prefix_len; ++i) prefix.push_back(3 + static_cast<int32_t>(rng() % 500));
  std::vector<Job> jobs;
  for (int i = 0; i < count; ++i) {
    Job j;
    j.id = "req-" + std::to_string(i);
    const int len = 1 + static_cast<int>((static_cast<uint64_t>(i) * 397 + rng() % 7) % 400);
    j.prompt = {1};  // BOS
    j.prompt.insert(j.prompt.end(), prefix.begin(), prefix.end());
    while (static_cast<int>(j.prompt.size()) < std::max(len, shared_prefix_len + 2)) {
      j.prompt.push_back(3 + static_cast<int32_t>(rng() % 500));
    }
    j.max_tokens = 1 + static_cast<int>(rng() % 40);
    if (static_cast<int>(j.prompt.size()) + j.max_tokens > 512) j.max_tokens = 512 - static_cast<int>(j.prompt.size());
    j.submit_step = static_cast<int>(rng() % 30);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::vector<Job> make_long_jobs(int count, uint32_t seed, int max_prompt, int min_tokens, int spread) {
  std::vector<Job> jobs = make_jobs(count, seed);
  for (auto& j : jobs) {
    if (static_cast<int>(j.prompt.size()) > max_prompt) j.prompt.resize(static_cast<size_t>(max_prompt));
    j.max_tokens = min_tokens + static_cast<int>(j.prompt.size() % static_cast<size_t>(spread));
  }
  return jobs;
}

GenerateRequest make_greedy_request(const Job& job) {
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = job.max_tokens;
  p->ignore_eos = true;  // fixed lengths make the comparison stricter
  GenerateRequest r;
  r.request_id = job.id;
  r.prompt_token_ids = job.prompt;
  r.params = p;
  return r;
}

Outputs run_requests(Engine& engine, const std::vector<GenerateRequest>& reqs) {
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    streams[r.request_id] = std::make_shared<RequestStream>(r.request_id);
    engine.add_request(r, streams[r.request_id]);
  }
  Outputs out;
  for (int step = 0; engine.has_unfinished_requests() && step < 100000; ++step) {
    engine.step();
    for (auto& [id, st] : streams) {
      while (auto o = st->next(std::chrono::milliseconds(0))) {
        EXPECT_FALSE(o->error.has_value()) << *o->error;
        for (const auto& d : o->outputs) out[id].insert(out[id].end(), d.token_ids.begin(), d.token_ids.end());
      }
    }
  }
  EXPECT_FALSE(engine.has_unfinished_requests());
  return out;
}

namespace {

GenerateRequest with_params(const Job& job, const std::string& id, const SamplingParams& p) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_token_ids = job.prompt;
  r.params = std::make_shared<SamplingParams>(p);
  return r;
}

}  // namespace

GenerateRequest make_seeded_request(const Job& job, const std::string& id) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 42;
  p.max_tokens = 32;
  p.ignore_eos = true;
  return with_params(job, id, p);
}

GenerateRequest make_dry_request(const Job& job, const std::string& id) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.dry_multiplier = 0.8f;
  p.dry_sequence_breaker_ids = {13};  // set: the engine leaves resolving the strings out
  p.max_tokens = 24;
  p.seed = 7;  // a fixed stream: runs of the same batch give the same tokens
  p.ignore_eos = true;
  return with_params(job, id, p);
}

GenerateRequest make_prompt_logprobs_request(const Job& job, const std::string& id) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.prompt_logprobs = 3;
  p.logprobs = 2;
  p.max_tokens = 20;
  p.ignore_eos = true;
  return with_params(job, id, p);
}

Outputs run_batched(Engine& engine, const std::vector<Job>& jobs) {
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  Outputs out;
  std::vector<const Job*> order;
  for (const auto& j : jobs) order.push_back(&j);
  std::stable_sort(order.begin(), order.end(), [](auto a, auto b) { return a->submit_step < b->submit_step; });
  size_t submitted = 0;
  for (int step = 0; submitted < order.size() || engine.has_unfinished_requests(); ++step) {
    while (submitted < order.size() && order[submitted]->submit_step <= step) {
      const Job& j = *order[submitted++];
      streams[j.id] = std::make_shared<RequestStream>(j.id);
      engine.add_request(make_greedy_request(j), streams[j.id]);
    }
    engine.step();
    for (auto& [id, s] : streams) {
      while (auto o = s->next(std::chrono::milliseconds(0))) {
        EXPECT_FALSE(o->error.has_value()) << *o->error;
        for (const auto& d : o->outputs) out[id].insert(out[id].end(), d.token_ids.begin(), d.token_ids.end());
      }
    }
    if (step >= 100000) {
      ADD_FAILURE() << "the engine does not finish";
      break;
    }
  }
  return out;
}

Outputs run_solo(const EngineConfig& cfg, const std::vector<Job>& jobs) {
  Engine engine(cfg);
  Outputs out;
  for (const auto& j : jobs) {
    Job solo = j;
    solo.submit_step = 0;
    out[j.id] = run_batched(engine, {solo})[j.id];
  }
  return out;
}

void expect_same_outputs(const std::vector<Job>& jobs, const Outputs& expected, const Outputs& got) {
  for (const auto& j : jobs) {
    ASSERT_TRUE(got.count(j.id)) << j.id << " produced nothing";
    ASSERT_EQ(got.at(j.id).size(), static_cast<size_t>(j.max_tokens)) << j.id;
    EXPECT_EQ(got.at(j.id), expected.at(j.id)) << j.id << " (prompt " << j.prompt.size() << " tokens)";
  }
}

EngineConfig with_chunked_prefill(EngineConfig cfg) {
  cfg.scheduler.enable_chunked_prefill = true;
  cfg.scheduler.max_num_batched_tokens = 64;
  cfg.scheduler.max_num_seqs = 16;
  return cfg;
}

EngineConfig with_preemption(EngineConfig cfg, const std::string& mode) {
  cfg.cache.num_gpu_blocks_override = 40;
  cfg.scheduler.preemption_mode = mode;
  if (mode == "swap") cfg.cache.swap_space = 0.01;
  return cfg;
}

std::string greedy_story(Engine& engine) {
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = 200;
  p->ignore_eos = true;
  auto stream = std::make_shared<RequestStream>("s");
  engine.add_request(GenerateRequest{"s", {1}, "", p, 0}, stream);
  while (engine.has_unfinished_requests()) engine.step();
  std::string text;
  while (auto o = stream->next(std::chrono::milliseconds(0))) {
    for (const auto& d : o->outputs) text += d.text;
  }
  return text;
}

std::string expected_greedy_story() {
  std::ifstream in(std::string(CYPRIS_TESTDATA_DIR) + "/models/stories260k/expected_greedy_200_from_bos.txt");
  EXPECT_TRUE(in) << "missing stories260k/expected_greedy_200_from_bos.txt";
  std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!expected.empty() && expected.back() == '\n') expected.pop_back();
  return expected;
}

}  // namespace cypris::testing_support
