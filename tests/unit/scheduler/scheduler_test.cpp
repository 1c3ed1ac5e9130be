// Scheduler: table-driven simulations (arrivals in, expected per-step schedules out, the fake
// runner checking every request's KV through its block table), plus refusals, config checks,
// preemption, prefix caching, fork and the delay factor.
#include "engine/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/request/sampling_params.h"
#include "tests/support/token_runs.h"
#include "tests/unit/scheduler/sim.h"

namespace cypris {
namespace {

using testing::fake_token;
using testing::StepPlan;

using test::seq;

SchedulerConfig base_config() {
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.max_model_len = 64;
  c.block_size = 8;
  c.num_gpu_blocks = 64;
  return c;
}

// Scheduler + fake runner + a clock the test moves.
struct Sim {
  explicit Sim(const SchedulerConfig& c) : sched(c, [this] { return now; }), runner(c) {}
  std::shared_ptr<Request> add(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens,
                               int32_t priority = 0) {
    auto r = std::make_shared<Request>(id, std::move(prompt), max_tokens, nullptr, priority, now);
    sched.add_request(r);
    all[id] = r;
    return r;
  }
  std::shared_ptr<Request> add(const std::string& id, int32_t prompt_len, int32_t max_tokens, int32_t priority = 0) {
    return add(id, seq(100 * int32_t(all.size() + 1), prompt_len), max_tokens, priority);
  }
  SchedulerOutput step(const std::set<std::string>& stop = {}) {
    SchedulerOutput out = sched.schedule();
    testing::check_invariants(sched, out, allow_idle);
    auto results = runner.execute(out, stop);
    updates = sched.update_from_output(out, results);
    return out;
  }
  // Every output token is the one the fake model produced for that position.
  void expect_outputs_match_model() {
    for (const auto& [id, r] : all) {
      auto out = r->output_token_ids();
      for (size_t i = 0; i < out.size(); ++i)
        EXPECT_EQ(out[i], fake_token(id, r->num_prompt_tokens() + int32_t(i))) << id << " output " << i;
    }
  }

  double now = 0.0;
  bool allow_idle = false;  // the test leaves requests idle (see check_invariants)
  Scheduler sched;
  testing::FakeRunner runner;
  std::map<std::string, std::shared_ptr<Request>> all;
  std::vector<RequestUpdate> updates;
};

struct Arrival {
  int step;  // added before this step's schedule() (1-based)
  std::string id;
  int32_t prompt_len;
  int32_t max_tokens;
  int32_t priority = 0;
};

struct Case {
  std::string name;
  SchedulerConfig config;
  std::vector<Arrival> arrivals;
  std::vector<StepPlan> expected;  // one entry per step
  std::map<int, std::vector<std::string>> preempted = {};
  std::map<int, std::vector<std::string>> swapped_out = {};
  std::map<int, std::vector<std::string>> swapped_in = {};
};

std::vector<Case> cases() {
  std::vector<Case> out;
  {
    // A long prompt is split across steps (budget 16) while A keeps decoding one token a step.
    SchedulerConfig c = base_config();
    c.max_num_batched_tokens = 16;
    c.enable_chunked_prefill = true;
    c.max_model_len = 128;
    out.push_back({"chunked_prefill_with_decodes",
                   c,
                   {{1, "A", 4, 6}, {2, "B", 40, 2}},
                   {{{"A", 4}},
                    {{"A", 1}, {"B", 15}},
                    {{"A", 1}, {"B", 15}},
                    {{"A", 1}, {"B", 10}},
                    {{"A", 1}, {"B", 1}},
                    {{"A", 1}}}});
  }
  {
    // Without chunked prefill B (40) does not fit after A's 30 in a budget of 64 and waits.
    out.push_back({"no_chunking_prompt_waits_for_budget",
                   base_config(),
                   {{1, "A", 30, 3}, {1, "B", 40, 3}},
                   {{{"A", 30}}, {{"A", 1}, {"B", 40}}, {{"A", 1}, {"B", 1}}, {{"B", 1}}}});
  }
  {
    SchedulerConfig c = base_config();
    c.max_num_seqs = 2;
    out.push_back({"max_num_seqs",
                   c,
                   {{1, "A", 4, 2}, {1, "B", 4, 2}, {1, "C", 4, 2}},
                   {{{"A", 4}, {"B", 4}}, {{"A", 1}, {"B", 1}}, {{"C", 4}}, {{"C", 1}}}});
  }
  {
    // Budget 8 across three 3-token prompts: C gets the last 2 tokens, then its last one with the decodes.
    SchedulerConfig c = base_config();
    c.max_num_batched_tokens = 8;
    c.enable_chunked_prefill = true;
    out.push_back(
        {"token_budget",
         c,
         {{1, "A", 3, 3}, {1, "B", 3, 3}, {1, "C", 3, 3}},
         {{{"A", 3}, {"B", 3}, {"C", 2}}, {{"A", 1}, {"B", 1}, {"C", 1}}, {{"A", 1}, {"B", 1}, {"C", 1}}, {{"C", 1}}}});
  }
  for (auto policy : {SchedulingPolicy::Fcfs, SchedulingPolicy::Priority}) {
    // One sequence at a time, so the admission order is visible. Priorities: A 2, B 0, C 1.
    SchedulerConfig c = base_config();
    c.max_num_seqs = 1;
    c.policy = policy;
    std::vector<StepPlan> order = policy == SchedulingPolicy::Fcfs
                                      ? std::vector<StepPlan>{{{"A", 4}}, {{"B", 4}}, {{"C", 4}}}
                                      : std::vector<StepPlan>{{{"B", 4}}, {{"C", 4}}, {{"A", 4}}};
    out.push_back({std::string("order_") + std::string(to_string(policy)),
                   c,
                   {{1, "A", 4, 1, 2}, {1, "B", 4, 1, 0}, {1, "C", 4, 1, 1}},
                   order});
  }
  {
    // 4 blocks of 8. A and B (12 + 12 tokens each) fill the cache; when A needs a third block
    // (step 6) the later arrival B is preempted, and recomputed (12 prompt + 5 output tokens)
    // once A has finished. C (1 block) arrives at step 8 and would fit in the free block, but B
    // is ahead of it: C waits until B is back.
    SchedulerConfig c = base_config();
    c.num_gpu_blocks = 4;
    std::vector<Arrival> arrivals = {{1, "A", 12, 12}, {1, "B", 12, 12}, {8, "C", 4, 2}};
    std::vector<StepPlan> plan;
    plan.push_back({{"A", 12}, {"B", 12}});
    for (int i = 2; i <= 5; ++i) plan.push_back({{"A", 1}, {"B", 1}});
    for (int i = 6; i <= 12; ++i) plan.push_back({{"A", 1}});
    plan.push_back({{"B", 17}, {"C", 4}});
    plan.push_back({{"B", 1}, {"C", 1}});
    for (int i = 15; i <= 19; ++i) plan.push_back({{"B", 1}});
    out.push_back({"recompute_preemption", c, arrivals, plan, {{6, {"B"}}}});
    // Same with swapping: B's 2 computed blocks go to the CPU and come back; it resumes with 1
    // token. Swapped requests come back before new ones (C) are admitted.
    c.preemption_mode = PreemptionMode::Swap;
    c.num_cpu_blocks = 4;
    plan[12] = {{"B", 1}, {"C", 4}};
    out.push_back({"swap_preemption", c, arrivals, plan, {}, {{6, {"B"}}}, {{13, {"B"}}}});
  }
  {
    // Priority, short of blocks: A (priority 3) holds all 4 blocks after its first decode; B
    // (priority 0) needs 2, so A is preempted for it and recomputes (24 prompt + 2 output
    // tokens) after B.
    SchedulerConfig c = base_config();
    c.num_gpu_blocks = 4;
    c.policy = SchedulingPolicy::Priority;
    out.push_back({"priority_preempts_for_blocks",
                   c,
                   {{1, "A", 24, 4, 3}, {3, "B", 16, 2, 0}},
                   {{{"A", 24}}, {{"A", 1}}, {{"B", 16}}, {{"B", 1}}, {{"A", 26}}, {{"A", 1}}},
                   {{3, {"A"}}}});
  }
  {
    // Priority: B (priority 0) arrives while A (5) holds the only sequence slot: A is preempted,
    // B runs, then A recomputes its 4 prompt + 2 output tokens.
    SchedulerConfig c = base_config();
    c.max_num_seqs = 1;
    c.policy = SchedulingPolicy::Priority;
    out.push_back({"priority_preempts_running",
                   c,
                   {{1, "A", 4, 4, 5}, {3, "B", 4, 2, 0}},
                   {{{"A", 4}}, {{"A", 1}}, {{"B", 4}}, {{"B", 1}}, {{"A", 6}}, {{"A", 1}}},
                   {{3, {"A"}}}});
  }
  return out;
}

TEST(Scheduler, TableDrivenSchedules) {
  for (const auto& tc : cases()) {
    SCOPED_TRACE(tc.name);
    Sim sim(tc.config);
    for (int step = 1; step <= int(tc.expected.size()); ++step) {
      sim.now = step;
      for (const auto& a : tc.arrivals)
        if (a.step == step) sim.add(a.id, a.prompt_len, a.max_tokens, a.priority);
      SchedulerOutput out = sim.step();
      EXPECT_EQ(testing::to_text(testing::plan_of(out)), testing::to_text(tc.expected[size_t(step - 1)]))
          << "step " << step;
      auto ids_at = [&](const std::map<int, std::vector<std::string>>& m) {
        auto it = m.find(step);
        return it == m.end() ? std::vector<std::string>{} : it->second;
      };
      EXPECT_EQ(out.preempted_ids, ids_at(tc.preempted)) << "step " << step;
      EXPECT_EQ(out.swapped_out_ids, ids_at(tc.swapped_out)) << "step " << step;
      EXPECT_EQ(out.swapped_in_ids, ids_at(tc.swapped_in)) << "step " << step;
    }
    EXPECT_FALSE(sim.sched.has_unfinished_requests()) << "all requests finish within the table";
    for (const auto& a : tc.arrivals) {
      const auto& r = sim.all.at(a.id);
      EXPECT_EQ(r->status(), RequestStatus::FinishedLength) << a.id;
      EXPECT_EQ(r->num_output_tokens(), a.max_tokens) << a.id;
    }
    sim.expect_outputs_match_model();
    EXPECT_EQ(sim.sched.kv_cache().num_free_blocks(), tc.config.num_gpu_blocks) << "every block came back";
  }
}

TEST(Scheduler, ChunkedPrefillSamplesOnlyAfterTheLastChunk) {
  SchedulerConfig c = base_config();
  c.max_num_batched_tokens = 16;
  c.enable_chunked_prefill = true;
  Sim sim(c);
  auto b = sim.add("B", 40, 2);
  for (int step = 1; step <= 3; ++step) {
    auto out = sim.step();
    ASSERT_EQ(out.scheduled.size(), 1u);
    EXPECT_EQ(out.scheduled[0].is_new, step == 1);
    EXPECT_EQ(out.scheduled[0].samples, step == 3) << "step " << step;
    EXPECT_EQ(out.scheduled[0].num_computed_tokens, 16 * (step - 1));
    EXPECT_EQ(b->num_output_tokens(), step == 3 ? 1 : 0);
  }
}

TEST(Scheduler, RefusesRequestsThatCanNeverRun) {
  SchedulerConfig c = base_config();
  c.max_model_len = 4096;
  c.max_num_batched_tokens = 4096;
  c.block_size = 16;
  c.num_gpu_blocks = 10;  // 160 tokens
  Scheduler s(c);
  auto message = [&](int32_t prompt, int32_t max_tokens) {
    try {
      s.add_request(std::make_shared<Request>("r", seq(0, prompt), max_tokens));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(5000, 16), "prompt is 5000 tokens but this model's maximum context length is 4096");
  EXPECT_EQ(message(4000, 200),
            "prompt is 4000 tokens and max_tokens is 200, 4200 in total, but this model's maximum context length "
            "is 4096; lower max_tokens to at most 96");
  EXPECT_EQ(message(100, 100),
            "prompt plus max_tokens is 200 tokens, which needs 13 KV-cache blocks of 16 tokens, but the whole cache "
            "has 10 blocks (160 tokens); lower max_tokens or give the KV cache more memory");
  EXPECT_EQ(message(0, 10), "the prompt is empty; at least one token is needed");
  EXPECT_EQ(message(10, 0), "max_tokens must be at least 1, got 0");
  EXPECT_FALSE(s.has_unfinished_requests()) << "refused requests are not queued";
  EXPECT_EQ(message(100, 60), "accepted");
  EXPECT_EQ(message(10, 10), "request id 'r' is already in use");
}

TEST(SchedulerConfig, ValidateNamesTheFlag) {
  auto error_of = [](const SchedulerConfig& c) {
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto has = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  SchedulerConfig c = base_config();
  EXPECT_EQ(error_of(c), "");
  c.max_num_batched_tokens = 32;  // < max_model_len 64 without chunked prefill
  EXPECT_TRUE(has(error_of(c), "--max-num-batched-tokens (32) is smaller than --max-model-len (64)")) << error_of(c);
  c.enable_chunked_prefill = true;
  EXPECT_EQ(error_of(c), "") << "allowed with chunked prefill";
  c = base_config();
  c.max_num_seqs = 0;
  EXPECT_TRUE(has(error_of(c), "--max-num-seqs")) << error_of(c);
  c = base_config();
  c.max_num_seqs = 100;
  EXPECT_TRUE(has(error_of(c), "--max-num-batched-tokens (64) must be >= --max-num-seqs (100)")) << error_of(c);
  c = base_config();
  c.delay_factor = -1;
  EXPECT_TRUE(has(error_of(c), "--scheduler-delay-factor")) << error_of(c);
  c = base_config();
  c.block_size = 12;
  EXPECT_TRUE(has(error_of(c), "--block-size must be one of 8, 16, 32, got 12")) << error_of(c);
  c = base_config();
  c.preemption_mode = PreemptionMode::Swap;
  EXPECT_TRUE(has(error_of(c), "--swap-space")) << error_of(c);
  c = base_config();
  c.max_model_len = 0;
  EXPECT_TRUE(has(error_of(c), "--max-model-len")) << error_of(c);
  EXPECT_THROW(Scheduler(SchedulerConfig{}), Error) << "0 GPU blocks";

  EXPECT_EQ(parse_scheduling_policy("priority"), SchedulingPolicy::Priority);
  EXPECT_EQ(parse_preemption_mode("swap"), PreemptionMode::Swap);
  EXPECT_THROW(parse_scheduling_policy("lifo"), Error);
  EXPECT_THROW(parse_preemption_mode("drop"), Error);
}

TEST(Scheduler, PrefixCacheHitSkipsSharedPrefix) {
  SchedulerConfig c = base_config();
  c.enable_prefix_caching = true;
  Sim sim(c);
  auto a = sim.add("A", seq(0, 40), 3);
  sim.step();  // A prefilled: its 5 full blocks are cached
  std::vector<int32_t> b_prompt = seq(0, 32);
  for (int32_t t : seq(900, 8)) b_prompt.push_back(t);
  auto b = sim.add("B", b_prompt, 3);
  auto out = sim.step();
  ASSERT_EQ(out.scheduled.size(), 2u);
  const auto& sb = out.scheduled[1];
  EXPECT_EQ(sb.request->request_id(), "B");
  EXPECT_EQ(sb.num_computed_tokens, 32);
  EXPECT_EQ(sb.num_scheduled_tokens, 8) << "only the part after the shared prefix is computed";
  EXPECT_EQ(b->num_cached_tokens(), 32);
  const auto& sa = out.scheduled[0];
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sb.block_ids[size_t(i)], sa.block_ids[size_t(i)]);
    EXPECT_EQ(sim.sched.kv_cache().gpu_pool().ref_count(sa.block_ids[size_t(i)]), 2);
  }
  auto st = sim.sched.stats();
  EXPECT_DOUBLE_EQ(st.prefix_cache_hit_rate, 32.0 / 80.0);
  while (sim.sched.has_unfinished_requests()) sim.step();
  sim.expect_outputs_match_model();  // B's tokens came from KV it read from A's blocks
}

TEST(Scheduler, ForkSharesBlocksAndCopiesOnWrite) {
  Sim sim(base_config());
  auto a = sim.add("A", 10, 4);
  sim.step();
  ASSERT_EQ(a->num_output_tokens(), 1);
  auto shared_block = sim.sched.kv_cache().block_ids("A")[1];
  auto child = sim.sched.fork_request("A", "A.1");
  ASSERT_TRUE(child);
  child->replace_last_output_token(7);
  sim.all["A.1"] = child;
  EXPECT_EQ(sim.sched.kv_cache().gpu_pool().ref_count(shared_block), 2);
  auto out = sim.step();
  EXPECT_EQ(testing::to_text(testing::plan_of(out)), "{A:1 A.1:1 }");
  EXPECT_FALSE(out.scheduled[0].is_new);
  EXPECT_TRUE(out.scheduled[1].is_new) << "the runner sees the child for the first time";
  ASSERT_EQ(out.blocks_to_copy.size(), 1u) << "one of the two gets a private copy of the partly filled block";
  EXPECT_EQ(out.blocks_to_copy[0].src, shared_block);
  EXPECT_NE(out.scheduled[0].block_ids[1], out.scheduled[1].block_ids[1]);
  EXPECT_EQ(out.scheduled[0].block_ids[0], out.scheduled[1].block_ids[0]) << "the full block stays shared";
  while (sim.sched.has_unfinished_requests()) sim.step();
  EXPECT_EQ(child->output_token_ids()[0], 7);
  EXPECT_EQ(child->num_output_tokens(), 4);
  EXPECT_EQ(a->num_output_tokens(), 4);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(child->output_token_ids()[size_t(i)], fake_token("A.1", 10 + i));
    EXPECT_EQ(a->output_token_ids()[size_t(i)], fake_token("A", 10 + i));
  }
  EXPECT_EQ(sim.sched.kv_cache().num_free_blocks(), 64);
}

TEST(Scheduler, RewindDropsTokensAndRecomputesFromTheBlockStart) {
  // banned_strings: the engine drops output tokens of a running request; its KV is kept up to
  // the block holding the new last token and the rest is recomputed before the next sample.
  SchedulerConfig c = base_config();
  c.enable_prefix_caching = true;
  Sim sim(c);
  auto a = sim.add("A", 10, 20);
  while (a->num_output_tokens() < 10) sim.step();
  ASSERT_EQ(sim.sched.kv_cache().block_ids("A").size(), 3u);  // 20 tokens in blocks of 8
  ASSERT_TRUE(sim.sched.rewind_request("A", 5));
  EXPECT_EQ(a->num_tokens(), 15);
  EXPECT_EQ(a->num_computed_tokens(), 8);  // block 0 kept; block 1 (tokens 8..15) recomputed
  EXPECT_EQ(sim.sched.kv_cache().block_ids("A").size(), 1u);
  EXPECT_EQ(a->block_hashes().size(), 1u);
  auto out = sim.step();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_computed_tokens, 8);
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 7);
  EXPECT_TRUE(out.scheduled[0].samples);
  EXPECT_EQ(a->num_output_tokens(), 6);
  EXPECT_FALSE(sim.sched.rewind_request("nobody", 1));
  while (sim.sched.has_unfinished_requests()) sim.step();
  EXPECT_EQ(a->num_output_tokens(), 20);
  sim.expect_outputs_match_model();
  EXPECT_EQ(sim.sched.kv_cache().num_free_blocks(), 64);
}

TEST(Scheduler, IdleRequestsDoNotCountAgainstMaxNumSeqs) {
  // A beam waiting for its siblings' logits got no token: it holds its blocks but no batch slot.
  SchedulerConfig c = base_config();
  c.max_num_seqs = 2;
  Sim sim(c);
  sim.allow_idle = true;
  auto a = sim.add("A", 4, 8);
  auto b = sim.add("B", 4, 8);
  SchedulerOutput out = sim.sched.schedule();
  auto results = sim.runner.execute(out, {});
  results.erase(std::remove_if(results.begin(), results.end(), [](const auto& r) { return r.request_id == "A"; }),
                results.end());
  sim.sched.update_from_output(out, results);
  ASSERT_EQ(a->num_output_tokens(), 0);
  ASSERT_EQ(a->num_computed_tokens(), a->num_tokens());
  sim.add("C", 4, 8);
  out = sim.step();
  EXPECT_EQ(testing::to_text(testing::plan_of(out)), "{B:1 C:4 }");
  EXPECT_EQ(sim.sched.stats().num_running, 3);
  a->append_output_token(5);  // the beam continues; the batch stays within max_num_seqs
  out = sim.step();
  EXPECT_EQ(testing::to_text(testing::plan_of(out)), "{A:1 B:1 }");
  out = sim.step();
  EXPECT_EQ(testing::to_text(testing::plan_of(out)), "{A:1 B:1 }") << "C waits while A and B, older, run";
}

TEST(Scheduler, DelayFactorHoldsNewPromptsBack) {
  for (double factor : {0.0, 0.5}) {
    SCOPED_TRACE(factor);
    SchedulerConfig c = base_config();
    c.delay_factor = factor;
    Sim sim(c);
    sim.now = 0;
    sim.add("A", 4, 10);
    EXPECT_EQ(testing::to_text(testing::plan_of(sim.step())), "{A:4 }");
    sim.now = 1.0;  // the prompt step took 1 s
    sim.step();
    sim.add("B", 4, 2);  // arrives at t = 1.0
    sim.now = 1.2;       // waited 0.2 s < 0.5 * 1 s
    EXPECT_EQ(testing::to_text(testing::plan_of(sim.step())), factor > 0 ? "{A:1 }" : "{A:1 B:4 }");
    sim.now = 1.6;  // waited 0.6 s
    EXPECT_EQ(testing::to_text(testing::plan_of(sim.step())), factor > 0 ? "{A:1 B:4 }" : "{A:1 B:1 }");
  }
}

TEST(Scheduler, StopAbortAndFinishedIds) {
  Sim sim(base_config());
  auto a = sim.add("A", 4, 10);
  auto b = sim.add("B", 4, 10);
  auto c = sim.add("C", 4, 10);
  sim.step();
  sim.step({"A"});  // A's sampled token is EOS
  EXPECT_EQ(a->status(), RequestStatus::FinishedStopped);
  EXPECT_EQ(a->num_output_tokens(), 2) << "the stop token is kept";
  EXPECT_TRUE(sim.sched.abort_request("B"));
  EXPECT_FALSE(sim.sched.abort_request("B"));
  EXPECT_EQ(b->status(), RequestStatus::FinishedAborted);
  auto out = sim.sched.schedule();
  EXPECT_EQ(out.finished_ids, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(testing::to_text(testing::plan_of(out)), "{C:1 }");
  // C is aborted while its step runs: the step's results for it are ignored.
  sim.sched.abort_request("C");
  std::vector<StepResult> results = {{"C", {5}, RequestStatus::Running}};
  auto updates = sim.sched.update_from_output(out, results);
  EXPECT_TRUE(updates.empty());
  EXPECT_EQ(c->num_output_tokens(), 2);
  EXPECT_EQ(sim.sched.schedule().finished_ids, (std::vector<std::string>{"C"}));
  EXPECT_EQ(sim.sched.kv_cache().num_free_blocks(), 64);
}

TEST(Scheduler, StatsSnapshot) {
  SchedulerConfig c = base_config();
  c.max_num_seqs = 2;
  Sim sim(c);
  sim.add("A", 16, 5);
  sim.add("B", 8, 5);
  sim.add("C", 8, 5);
  sim.step();
  auto st = sim.sched.stats();
  EXPECT_EQ(st.num_running, 2);
  EXPECT_EQ(st.num_waiting, 1);
  EXPECT_EQ(st.num_swapped, 0);
  // Blocks cover the tokens computed so far: A 16 -> 2 blocks, B 8 -> 1.
  EXPECT_DOUBLE_EQ(st.kv_cache_usage, 3.0 / 64.0);
  EXPECT_EQ(st.num_preemptions, 0);
}

}  // namespace
}  // namespace cypris

namespace cypris {
namespace {

// --context-shift: a request longer than the context keeps its first tokens, drops half of the
// others each time the window is full, and runs to max_tokens; the fake runner checks every step
// that the KV it reads through the block table is that of the shifted window's tokens at their new
// positions (kept blocks reused, the rest recomputed).
TEST(Scheduler, ContextShiftKeepsThePrefixAndRecomputesTheShiftedWindow) {
  SchedulerConfig c = base_config();  // 64-token context, blocks of 8
  {
    Sim plain(c);
    EXPECT_THROW(plain.add("x", 20, 100), Error);
  }
  c.context_shift = true;
  c.enable_prefix_caching = true;
  Sim sim(c);
  auto r = sim.add("a", 20, 100);  // keeps min(20, 64 / 4) = 16 tokens
  const std::vector<int32_t> prompt(r->all_token_ids().begin(), r->all_token_ids().end());
  int steps = 0;
  int32_t max_window = 0;
  while (sim.sched.has_unfinished_requests() && steps < 1000) {
    sim.step();
    ++steps;
    max_window = std::max(max_window, r->num_tokens());
    const auto t = r->all_token_ids();
    ASSERT_TRUE(std::equal(prompt.begin(), prompt.begin() + 16, t.begin())) << "the kept prefix changed";
  }
  EXPECT_EQ(r->status(), RequestStatus::FinishedLength);
  EXPECT_EQ(r->num_output_tokens(), 100);
  EXPECT_LE(max_window, 64);
  // 100 outputs through a 64-token window keeping 16: the first shift at 64 tokens drops 24, each
  // later one again 24 of the 48 after the prefix.
  EXPECT_EQ(r->num_shifted_tokens(), 24 * sim.sched.stats().num_context_shifts);
  EXPECT_GE(sim.sched.stats().num_context_shifts, 3);
  EXPECT_EQ(r->num_tokens() + r->num_shifted_tokens(), 120);
}

// --context-shift by rotation: the moved tokens keep their KV. The fake runner checks that each
// move reads the token at its old position and that every step reads each request's window back at
// the right positions; after a shift only the new token is computed, not the window again.
TEST(Scheduler, ContextShiftByRotationMovesTheKeptKvToTheShiftedPositions) {
  struct Mode {
    const char* name;
    bool prefix_caching, chunked;
    int32_t gpu_blocks;
    int32_t n_keep;  // -2: unset
  };
  for (const Mode& m : {Mode{"plain", false, false, 64, -2}, Mode{"prefix caching + chunked", true, true, 64, -2},
                        Mode{"n_keep 5 (not on a block boundary)", true, false, 64, 5},
                        Mode{"n_keep -1 (the prompt)", false, false, 64, -1},
                        Mode{"few free blocks", false, false, 17, -2}}) {
    SCOPED_TRACE(m.name);
    SchedulerConfig c = base_config();  // 64-token context, blocks of 8
    c.context_shift = true;
    c.context_shift_rotate = true;
    c.enable_prefix_caching = m.prefix_caching;
    c.enable_chunked_prefill = m.chunked;
    c.num_gpu_blocks = m.gpu_blocks;
    if (m.chunked) c.max_num_batched_tokens = 16;
    Sim sim(c);
    auto params = std::make_shared<SamplingParams>();
    if (m.n_keep != -2) params->n_keep = m.n_keep;
    std::vector<std::shared_ptr<Request>> rs;
    for (int i = 0; i < 2; ++i) {
      auto r = std::make_shared<Request>("r" + std::to_string(i), seq(100 * (i + 1), 20 + i), 100, params);
      sim.sched.add_request(r);
      sim.all[r->request_id()] = r;
      rs.push_back(r);
    }
    const int32_t keep = m.n_keep == -2 ? 16 : m.n_keep == -1 ? 20 : m.n_keep;
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& r : rs) prompts.emplace_back(r->all_token_ids().begin(), r->all_token_ids().end());
    int64_t computed_after_prompts = 0;
    for (int steps = 0; sim.sched.has_unfinished_requests() && steps < 1000; ++steps) {
      const SchedulerOutput out = sim.step();
      if (steps > 8) computed_after_prompts += out.total_num_scheduled_tokens;
      for (size_t i = 0; i < rs.size(); ++i) {
        const auto t = rs[i]->all_token_ids();
        const int32_t k = std::min<int32_t>(keep, int32_t(prompts[i].size()));
        ASSERT_TRUE(std::equal(prompts[i].begin(), prompts[i].begin() + k, t.begin())) << "the kept prefix changed";
      }
    }
    for (const auto& r : rs) {
      EXPECT_EQ(r->status(), RequestStatus::FinishedLength);
      EXPECT_EQ(r->num_output_tokens(), 100);
      EXPECT_EQ(r->num_tokens() + r->num_shifted_tokens(), r->num_prompt_tokens() + 100);
    }
    EXPECT_GE(sim.sched.stats().num_context_shifts, 4);
    EXPECT_GT(sim.runner.num_moves(), 0);
    if (m.gpu_blocks == 64) {
      // Every shift kept its moved tokens' KV: after the prompts, one token per request per step.
      EXPECT_LE(computed_after_prompts, 2 * 100);
    }
  }
}

}  // namespace
}  // namespace cypris
