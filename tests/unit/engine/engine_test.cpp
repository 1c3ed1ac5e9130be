// The engine core against itself run one request at a time: continuous batching, chunked
// prefill, preemption (recompute and swap) and prefix caching must not change a greedy output.
#include "engine/core/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <fstream>
#include <random>
#include <thread>

#include "engine/common/error.h"
#include "engine/core/async_engine.h"
#include "engine/request/sampling_params.h"
#include "tests/support/engine_jobs.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

using namespace testing_support;

// The CPU engine; tests/gpu/cuda/engine_test.cpp runs the same on a GPU.
EngineConfig base_config() { return stories_config(); }

class Equivalence : public EquivalenceSuite<Equivalence> {
 public:
  static EngineConfig solo_config() { return base_config(); }
};

TEST_F(Equivalence, ContinuousBatching) {
  Engine engine(base_config());
  expect_batch_like_solo(engine);
}

TEST_F(Equivalence, ChunkedPrefill) {
  Engine engine(with_chunked_prefill(base_config()));
  expect_batch_like_solo(engine);
}

TEST_F(Equivalence, PreemptionByRecompute) {
  Engine engine(with_preemption(base_config(), "recompute"));
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().num_preemptions_total, 0);
}

TEST_F(Equivalence, PreemptionBySwap) {
  Engine engine(with_preemption(base_config(), "swap"));
  expect_batch_like_solo(engine);
  EXPECT_GT(engine.stats().num_swap_outs_total, 0);
}

// The defaults since issue #32 (prefix caching and chunked prefill on, as vLLM V1) give the outputs
// of the plain modes.
TEST_F(Equivalence, DefaultPrefixCachingAndChunkedPrefill) {
  EngineConfig cfg = base_config();
  const EngineConfig defaults;
  ASSERT_TRUE(defaults.cache.enable_prefix_caching);
  ASSERT_TRUE(defaults.scheduler.enable_chunked_prefill);
  cfg.cache.enable_prefix_caching = defaults.cache.enable_prefix_caching;
  cfg.scheduler.enable_chunked_prefill = defaults.scheduler.enable_chunked_prefill;
  Engine engine(cfg);
  expect_batch_like_solo(engine);
}

// A chat client re-sends the whole conversation every turn: with the defaults each turn after the
// first is served mostly from the prefix cache, and every turn's reply is the one the engine gives
// with --no-enable-prefix-caching --no-enable-chunked-prefill.
TEST(PrefixCaching, ChatTurnsReuseTheConversationByDefault) {
  auto chat = [](bool defaults) {
    EngineConfig cfg = base_config();
    if (defaults) {
      cfg.cache.enable_prefix_caching = EngineConfig{}.cache.enable_prefix_caching;
      cfg.scheduler.enable_chunked_prefill = EngineConfig{}.scheduler.enable_chunked_prefill;
    }
    Engine engine(cfg);
    std::vector<int32_t> conversation = {1};
    std::vector<std::pair<std::vector<int32_t>, int64_t>> turns;  // reply, cached prompt tokens
    std::mt19937 rng(5);
    for (int turn = 0; turn < 4; ++turn) {
      for (int i = 0; i < 40; ++i) conversation.push_back(3 + static_cast<int32_t>(rng() % 400));  // the user's text
      auto p = std::make_shared<SamplingParams>();
      p->temperature = 0.0f;
      p->max_tokens = 12;
      p->ignore_eos = true;
      const std::string id = "turn" + std::to_string(turn);
      auto stream = std::make_shared<RequestStream>(id);
      engine.add_request(GenerateRequest{id, conversation, "", p, 0}, stream);
      while (engine.has_unfinished_requests()) engine.step();
      std::vector<int32_t> reply;
      int64_t cached = 0;
      while (auto o = stream->next(std::chrono::milliseconds(0))) {
        cached = std::max(cached, o->num_cached_prompt_tokens);
        for (const auto& d : o->outputs) reply.insert(reply.end(), d.token_ids.begin(), d.token_ids.end());
      }
      conversation.insert(conversation.end(), reply.begin(), reply.end());
      turns.emplace_back(reply, cached);
    }
    return turns;
  };
  const auto with = chat(true), without = chat(false);
  for (size_t t = 0; t < with.size(); ++t) {
    EXPECT_EQ(with[t].first, without[t].first) << "turn " << t;
    EXPECT_EQ(without[t].second, 0) << "turn " << t;
    // Every full block of the previous turn's conversation is reused (16-token blocks).
    if (t > 0) EXPECT_GE(with[t].second, 16 * ((41 + 52 * static_cast<int64_t>(t - 1)) / 16)) << "turn " << t;
  }
}

TEST(PrefixCaching, SharedPrefixesHitTheCacheAndKeepOutputs) {
  auto jobs = make_jobs(16, 99, /*shared_prefix_len=*/200);
  auto solo = run_solo(base_config(), jobs);
  EngineConfig cfg = base_config();
  cfg.cache.enable_prefix_caching = true;
  Engine engine(cfg);
  auto got = run_batched(engine, jobs);
  for (const auto& j : jobs) EXPECT_EQ(got.at(j.id), solo.at(j.id)) << j.id;
  EXPECT_GT(engine.stats().prefix_cache_hit_rate, 0.5);
}

TEST(EngineOutputs, StoriesGreedyTextFromBos) {
  // The whole path (scheduler, paged attention, sampler, detokenizer) reproduces the model's
  // known greedy story.
  Engine engine(base_config());
  EXPECT_EQ(greedy_story(engine), expected_greedy_story());
}

TEST(EngineOutputs, StopStringsNAndLimits) {
  Engine engine(base_config());
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = 100;
  p->stop = {"Lily"};
  p->n = 2;
  auto stream = std::make_shared<RequestStream>("s");
  engine.add_request(GenerateRequest{"s", {1}, "", p, 0}, stream);
  while (engine.has_unfinished_requests()) engine.step();
  std::map<int, std::string> text;
  std::map<int, std::string> reason;
  bool finished = false;
  while (auto o = stream->next(std::chrono::milliseconds(0))) {
    for (const auto& d : o->outputs) {
      text[d.index] += d.text;
      if (d.finish_reason) reason[d.index] = *d.finish_reason;
    }
    finished = o->finished;
  }
  EXPECT_TRUE(finished);
  for (int i : {0, 1}) {
    EXPECT_EQ(text[i], "Once upon a time, there was a little girl named ");
    EXPECT_EQ(reason[i], "stop");
  }
}

TEST(EngineOutputs, RefusesRequestsThatCanNeverRun) {
  Engine engine(base_config());
  auto p = std::make_shared<SamplingParams>();
  p->max_tokens = 200;
  std::vector<int32_t> long_prompt(400, 5);
  try {
    engine.add_request(GenerateRequest{"x", long_prompt, "", p, 0}, std::make_shared<RequestStream>("x"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("maximum context length is 512 tokens"));
  }
  EXPECT_THROW(engine.add_request(GenerateRequest{"y", {1, 99999}, "", p, 0}, std::make_shared<RequestStream>("y")),
               Error);
  EXPECT_FALSE(engine.has_unfinished_requests());
}

TEST(AsyncEngineTest, StreamsAbortsAndShutsDown) {
  AsyncEngine engine(base_config());
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = 300;
  p->ignore_eos = true;
  auto a = engine.submit(GenerateRequest{"a", {1}, "", p, 0});
  auto b = engine.submit(GenerateRequest{"b", {1}, "", p, 0});
  // Read a little of a, then cancel it; b runs to the end.
  auto first = a->next();
  ASSERT_TRUE(first.has_value());
  a->cancel();
  std::string last_reason;
  while (auto o = a->next()) {
    for (const auto& d : o->outputs) {
      if (d.finish_reason) last_reason = *d.finish_reason;
    }
  }
  EXPECT_EQ(last_reason, "abort");
  size_t tokens = 0;
  while (auto o = b->next()) {
    for (const auto& d : o->outputs) tokens += d.token_ids.size();
  }
  EXPECT_EQ(tokens, 300u);
  EXPECT_THROW(engine.submit(GenerateRequest{"c", std::vector<int32_t>(600, 5), "", p, 0}), Error);
}

// Waits until the engine's snapshot shows nothing running or waiting; false when it did not.
bool wait_idle(const AsyncEngine& engine) {
  for (int i = 0; i < 500; ++i) {
    const EngineStats st = engine.stats();
    if (st.num_running == 0 && st.num_waiting == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// issue #26 item 2: the prompts of one request are handed over together, all or none.
TEST(AsyncEngineTest, SubmitAllQueuesEveryPromptOrNone) {
  AsyncEngine engine(base_config());
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 0.0f;
  p->max_tokens = 200;
  p->ignore_eos = true;
  // The third prompt can never run: the first two must not stay queued either.
  std::vector<GenerateRequest> bad = {
      {"x-0", {1}, "", p, 0}, {"x-1", {1, 2}, "", p, 0}, {"x-2", std::vector<int32_t>(600, 5), "", p, 0}};
  EXPECT_THROW(engine.submit_all(std::move(bad)), Error);
  EXPECT_TRUE(wait_idle(engine));
  // The same ids are free again, and 300 prompts in one go all finish with their tokens.
  auto q = std::make_shared<SamplingParams>(*p);
  q->max_tokens = 2;
  std::vector<GenerateRequest> many;
  for (int i = 0; i < 300; ++i) many.push_back({"x-" + std::to_string(i), {1, 5 + i % 50}, "", q, 0});
  auto streams = engine.submit_all(std::move(many));
  ASSERT_EQ(streams.size(), 300u);
  for (auto& st : streams) {
    size_t tokens = 0;
    std::optional<std::string> error;
    while (auto o = st->next()) {
      for (const auto& d : o->outputs) tokens += d.token_ids.size();
      if (o->error) error = o->error;
    }
    EXPECT_FALSE(error) << *error;
    EXPECT_EQ(tokens, 2u) << st->request_id();
  }
  // Going idle gave the heap's free memory back.
  for (int i = 0; i < 500 && engine.idle_trims() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(engine.idle_trims(), 1);
}

// Cancelling every stream of a list ends every sequence (n = 2 each) of every prompt.
TEST(AsyncEngineTest, CancellingAListEndsEverySequenceOfEveryPrompt) {
  AsyncEngine engine(base_config());
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 1.0f;
  p->n = 2;
  p->max_tokens = 400;
  p->ignore_eos = true;
  std::vector<GenerateRequest> list;
  for (int i = 0; i < 40; ++i) list.push_back({"c-" + std::to_string(i), {1, 7 + i}, "", p, 0});
  auto streams = engine.submit_all(std::move(list));
  ASSERT_TRUE(streams.front()->next().has_value());  // generating
  for (auto& st : streams) st->cancel();
  for (auto& st : streams) {
    std::map<int, std::string> reason;
    while (auto o = st->next()) {
      for (const auto& d : o->outputs) {
        if (d.finish_reason) reason[d.index] = *d.finish_reason;
      }
    }
    EXPECT_EQ(reason.size(), 2u) << st->request_id();
  }
  EXPECT_TRUE(wait_idle(engine));
}

}  // namespace
}  // namespace cypris

namespace cypris {
namespace {

struct Collected {
  std::vector<int32_t> ids;
  std::vector<PositionLogprobs> logprobs;
  std::vector<PositionLogprobs> prompt_logprobs;
};

Collected run_one(Engine& engine, const std::vector<int32_t>& prompt, std::shared_ptr<SamplingParams> p) {
  auto stream = std::make_shared<RequestStream>("one");
  engine.add_request(GenerateRequest{"one", prompt, "", p, 0}, stream);
  while (engine.has_unfinished_requests()) engine.step();
  Collected c;
  while (auto o = stream->next(std::chrono::milliseconds(0))) {
    c.prompt_logprobs.insert(c.prompt_logprobs.end(), o->prompt_logprobs.begin(), o->prompt_logprobs.end());
    for (const auto& d : o->outputs) {
      c.ids.insert(c.ids.end(), d.token_ids.begin(), d.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    }
  }
  return c;
}

TEST(EngineLogprobs, PromptLogprobsMatchTheLogprobsOfTheSameTokensWhenGenerated) {
  // Generate greedily with logprobs, then feed BOS + those tokens back as a prompt: the prefill
  // rows must give each token the logprob the decode steps gave it, and rank 1 (it was the argmax),
  // whether the prompt runs in one step or in chunks.
  for (bool chunked : {false, true}) {
    EngineConfig cfg = base_config();
    cfg.scheduler.enable_chunked_prefill = chunked;
    if (chunked) {
      cfg.scheduler.max_num_batched_tokens = 16;
      cfg.scheduler.max_num_seqs = 4;
    }
    Engine engine(cfg);
    auto gen = std::make_shared<SamplingParams>();
    gen->temperature = 0.0f;
    gen->max_tokens = 40;
    gen->ignore_eos = true;
    gen->logprobs = 3;
    Collected g = run_one(engine, {1}, gen);
    ASSERT_EQ(g.ids.size(), 40u);
    ASSERT_EQ(g.logprobs.size(), 40u);

    std::vector<int32_t> prompt = {1};
    prompt.insert(prompt.end(), g.ids.begin(), g.ids.end());
    auto pp = std::make_shared<SamplingParams>();
    pp->temperature = 0.0f;
    pp->max_tokens = 1;
    pp->prompt_logprobs = 2;
    Collected c = run_one(engine, prompt, pp);
    ASSERT_EQ(c.prompt_logprobs.size(), 40u) << (chunked ? "chunked" : "one step");
    for (size_t i = 0; i < 40; ++i) {
      EXPECT_EQ(c.prompt_logprobs[i].token_id, g.ids[i]);
      EXPECT_NEAR(c.prompt_logprobs[i].logprob, g.logprobs[i].logprob, 1e-4) << i;
      EXPECT_EQ(c.prompt_logprobs[i].rank, 1) << i;
      ASSERT_EQ(c.prompt_logprobs[i].top.size(), 2u);
      EXPECT_EQ(c.prompt_logprobs[i].top[0].token_id, g.ids[i]);
    }
    // The generated logprobs carry the sampled token first among the top ones.
    EXPECT_EQ(g.logprobs[0].top.size(), 3u);
    EXPECT_EQ(g.logprobs[0].top[0].token_id, g.ids[0]);
    EXPECT_LE(g.logprobs[0].logprob, 0.0f);
  }
}

TEST(EngineSampling, SeededRequestsRepeatAndBestOfReturnsTheMostLikely) {
  Engine engine(base_config());
  auto p = std::make_shared<SamplingParams>();
  p->temperature = 1.0f;
  p->max_tokens = 20;
  p->seed = 42;
  Collected a = run_one(engine, {1}, p);
  Collected b = run_one(engine, {1}, p);
  EXPECT_EQ(a.ids, b.ids);

  auto best = std::make_shared<SamplingParams>(*p);
  best->n = 1;
  best->best_of = 4;
  best->seed.reset();
  best->logprobs = 0;
  auto stream = std::make_shared<RequestStream>("best");
  engine.add_request(GenerateRequest{"best", {1}, "", best, 0}, stream);
  while (engine.has_unfinished_requests()) engine.step();
  int outputs = 0;
  while (auto o = stream->next(std::chrono::milliseconds(0))) {
    for (const auto& d : o->outputs) {
      EXPECT_EQ(d.index, 0);
      ++outputs;
    }
  }
  EXPECT_EQ(outputs, 1);  // best_of > n: only the best n come back, once, at the end
}

}  // namespace
}  // namespace cypris
