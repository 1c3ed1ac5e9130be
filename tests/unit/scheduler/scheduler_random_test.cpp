// Randomized scheduler simulation (fixed seeds): random arrivals, lengths, priorities, shared
// prefixes, stops, aborts and forks under a small KV cache, across every combination of chunked
// prefill, policy, preemption mode, prefix caching and block size. After every step the
// invariants of sim.h hold and every request reads back its own tokens from the fake KV store;
// at the end every request has finished with the tokens the fake model produced, and every
// block is free again.
#include <gtest/gtest.h>

#include <random>

#include "engine/common/error.h"
#include "tests/unit/scheduler/sim.h"

namespace cypris {
namespace {

using testing::fake_token;

struct Totals {
  int64_t preempted = 0;
  int64_t swapped_out = 0;
  int64_t swapped_in = 0;
  int64_t cow_copies = 0;
  int64_t prefix_hits = 0;
  int64_t refused = 0;
};

void run_simulation(const SchedulerConfig& config, uint32_t seed, Totals& totals) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };

  double now = 0;
  Scheduler sched(config, [&] { return now; });
  testing::FakeRunner runner(config);
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 48; ++j) p.push_back(uniform(1, 500));
    prefixes.push_back(p);
  }

  struct Tracked {
    std::shared_ptr<Request> request;
    int32_t first_own_output = 0;  // outputs before this index were copied from a fork parent
  };
  std::map<std::string, Tracked> all;
  const int kRequests = 120;
  int submitted = 0;
  int step = 0;
  for (; step < 20000; ++step) {
    now = step * 0.01;
    if (submitted == kRequests && !sched.has_unfinished_requests()) break;
    // Arrivals: bursts of up to 3.
    if (submitted < kRequests && chance(0.3)) {
      for (int k = uniform(1, 3); k > 0 && submitted < kRequests; --k) {
        std::vector<int32_t> prompt;
        if (chance(0.5)) {
          const auto& p = prefixes[size_t(uniform(0, 2))];
          prompt.assign(p.begin(), p.begin() + uniform(1, 48));
        }
        for (int n = uniform(prompt.empty() ? 1 : 0, 40); n > 0; --n) prompt.push_back(uniform(1, 500));
        int32_t max_tokens = uniform(1, 40);
        if (chance(0.03)) max_tokens = config.max_model_len;  // cannot fit: must be refused
        std::string id = "r" + std::to_string(submitted++);
        auto r = std::make_shared<Request>(id, prompt, max_tokens, nullptr, uniform(0, 3), now);
        if (!sched.check_request(*r).empty()) {
          EXPECT_THROW(sched.add_request(r), Error);
          ++totals.refused;
          continue;
        }
        sched.add_request(r);
        all[id] = {r, 0};
      }
    }
    // Aborts and forks act between steps, like the engine's request queue.
    if (chance(0.01) && sched.has_unfinished_requests()) {
      auto it = all.begin();
      std::advance(it, uniform(0, int(all.size()) - 1));
      sched.abort_request(it->first);
    }
    if (chance(0.03) && !sched.running().empty()) {
      auto parent = sched.running()[size_t(uniform(0, int(sched.running().size()) - 1))];
      // Fork right after a sample, before the new token is computed (n > 1 / beam search).
      if (parent->num_output_tokens() > 0 && parent->num_computed_tokens() == parent->num_tokens() - 1) {
        std::string child_id = parent->request_id() + ".f" + std::to_string(step);
        if (auto child = sched.fork_request(parent->request_id(), child_id)) {
          child->replace_last_output_token(uniform(1, 500));
          all[child_id] = {child, child->num_output_tokens()};
        }
      }
    }

    SchedulerOutput out = sched.schedule();
    testing::check_invariants(sched, out);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "stopping at step " << step;
      return;
    }
    totals.preempted += int64_t(out.preempted_ids.size());
    totals.swapped_out += int64_t(out.swapped_out_ids.size());
    totals.swapped_in += int64_t(out.swapped_in_ids.size());
    totals.cow_copies += int64_t(out.blocks_to_copy.size());
    std::set<std::string> stop;
    for (const auto& s : out.scheduled)
      if (chance(0.02)) stop.insert(s.request->request_id());
    auto results = runner.execute(out, stop);
    sched.update_from_output(out, results);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "stopping at step " << step;
      return;
    }
  }
  ASSERT_FALSE(sched.has_unfinished_requests()) << "requests still unfinished after " << step << " steps";
  EXPECT_EQ(sched.kv_cache().num_free_blocks(), config.num_gpu_blocks);
  EXPECT_EQ(sched.kv_cache().num_free_cpu_blocks(), config.num_cpu_blocks);
  EXPECT_TRUE(sched.kv_cache().tables().empty());
  totals.prefix_hits += sched.stats().prefix_cache.hits;
  for (const auto& [id, t] : all) {
    const auto& r = *t.request;
    ASSERT_TRUE(r.finished()) << id;
    auto out = r.output_token_ids();
    if (r.status() == RequestStatus::FinishedLength) EXPECT_EQ(r.num_output_tokens(), r.max_tokens()) << id;
    if (r.status() != RequestStatus::FinishedAborted) EXPECT_GE(r.num_output_tokens(), 1) << id;
    EXPECT_LE(r.num_output_tokens(), r.max_tokens()) << id;
    for (size_t i = size_t(t.first_own_output); i < out.size(); ++i)
      ASSERT_EQ(out[i], fake_token(id, r.num_prompt_tokens() + int32_t(i))) << id << " output " << i;
  }
}

// Sizes of one family of simulations.
struct Shape {
  const char* name;
  int32_t max_num_seqs;
  int32_t chunked_budget;  // --max-num-batched-tokens with chunked prefill (without: max_model_len)
  int32_t gpu_tokens;      // KV cache size in tokens
  int32_t cpu_tokens;      // swap space in tokens
  double delay_factor;
};

void run_family(const Shape& shape, uint32_t seed, Totals& totals) {
  for (bool chunked : {false, true})
    for (auto policy : {SchedulingPolicy::Fcfs, SchedulingPolicy::Priority})
      for (auto mode : {PreemptionMode::Recompute, PreemptionMode::Swap})
        for (bool caching : {false, true})
          for (int32_t bs : {8, 16, 32}) {
            SchedulerConfig c;
            c.max_model_len = 128;
            c.enable_chunked_prefill = chunked;
            c.max_num_batched_tokens = chunked ? shape.chunked_budget : 128;
            c.max_num_seqs = shape.max_num_seqs;
            c.policy = policy;
            c.preemption_mode = mode;
            c.enable_prefix_caching = caching;
            c.block_size = bs;
            c.num_gpu_blocks = shape.gpu_tokens / bs;
            c.num_cpu_blocks = shape.cpu_tokens / bs;
            c.delay_factor = shape.delay_factor;
            SCOPED_TRACE(::testing::Message() << shape.name << ": chunked=" << chunked
                                              << " policy=" << to_string(policy) << " mode=" << to_string(mode)
                                              << " caching=" << caching << " block_size=" << bs << " seed=" << seed);
            run_simulation(c, seed++, totals);
            if (::testing::Test::HasFailure()) return;
          }
}

void expect_paths_exercised(const Totals& totals) {
  // The simulation must actually exercise the interesting paths.
  EXPECT_GT(totals.preempted, 0);
  EXPECT_GT(totals.swapped_out, 0);
  EXPECT_GT(totals.swapped_in, 0);
  EXPECT_GT(totals.cow_copies, 0);
  EXPECT_GT(totals.prefix_hits, 0);
  EXPECT_GT(totals.refused, 0);
  std::printf("preempted %lld, swapped out %lld / in %lld, copy-on-write %lld, prefix-hit tokens %lld, refused %lld\n",
              (long long)totals.preempted, (long long)totals.swapped_out, (long long)totals.swapped_in,
              (long long)totals.cow_copies, (long long)totals.prefix_hits, (long long)totals.refused);
}

TEST(SchedulerRandom, InvariantsHoldAndEveryRequestFinishes) {
  Totals totals;
  // Room for three full-length requests, eight sequences.
  run_family({"roomy", 8, 32, 384, 192, 0.0}, 1234, totals);
  expect_paths_exercised(totals);
}

TEST(SchedulerRandom, TightCacheAndFewSequences) {
  Totals totals;
  // The cache holds exactly one full-length request; three sequences, a 16-token budget when
  // chunked, and a delay factor holding prompts back: everything must still finish.
  run_family({"tight", 3, 16, 128, 64, 0.5}, 777, totals);
  expect_paths_exercised(totals);
}

}  // namespace
}  // namespace cypris
