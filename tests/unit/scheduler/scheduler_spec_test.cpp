// Scheduler with speculative decoding: drafted tokens are scheduled after a decode's last token
// (within the budget, max_tokens and the context length), the fake runner verifies them against
// its deterministic model, and the scheduler keeps the KV of accepted drafts only: the fake KV
// store checks every later read, rolled-back blocks go back to the pool, and the prefix cache
// never serves a rejected draft.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/scheduler/scheduler.h"
#include "tests/unit/scheduler/sim.h"

namespace cypris {
namespace {

using testing::fake_token;

constexpr int32_t kBs = 8;

SchedulerConfig config() {
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.max_model_len = 64;
  c.block_size = kBs;
  c.num_gpu_blocks = 64;
  c.num_lookahead_slots = 32;  // room for every draft the tests give
  return c;
}

std::vector<int32_t> prompt_of(int32_t first, int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Drafts for request r: the fake model's next `right` tokens, then `wrong` tokens it never makes.
std::vector<int32_t> drafts_for(const Request& r, int right, int wrong) {
  std::vector<int32_t> d;
  for (int i = 0; i < right; ++i) d.push_back(fake_token(r.request_id(), r.num_tokens() + i));
  for (int i = 0; i < wrong; ++i) d.push_back(7 + i);  // fake tokens are >= 1000
  return d;
}

struct SpecSim {
  explicit SpecSim(const SchedulerConfig& c) : sched(c), runner(c) {}
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    testing::check_invariants(sched, out);
    auto results = runner.execute(out);
    updates = sched.update_from_output(out, results);
    return out;
  }
  Scheduler sched;
  testing::FakeRunner runner;
  std::vector<RequestUpdate> updates;
};

void expect_model_outputs(const Request& r) {
  auto out = r.output_token_ids();
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i], fake_token(r.request_id(), r.num_prompt_tokens() + int32_t(i))) << r.request_id() << " " << i;
}

TEST(SchedulerSpec, DraftsRunAfterTheLastTokenAndOnlyAcceptedOnesKeepTheirKv) {
  SpecSim sim(config());
  auto a = std::make_shared<Request>("A", prompt_of(100, 6), 40);
  sim.sched.add_request(a);
  sim.step();  // prefill: drafts are ignored for a prompt
  ASSERT_EQ(a->num_output_tokens(), 1);
  // Mixed: 2 right + 3 wrong -> 3 tokens (2 accepted + the model's own), 5 lookahead tokens rolled back.
  for (auto [right, wrong] : std::vector<std::pair<int, int>>{{2, 3}, {0, 4}, {5, 0}, {1, 1}, {3, 5}}) {
    const int32_t before_tokens = a->num_tokens();
    a->set_spec_token_ids(drafts_for(*a, right, wrong));
    SchedulerOutput out = sim.step();
    ASSERT_EQ(out.scheduled.size(), 1u);
    EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 1 + right + wrong);
    EXPECT_EQ(out.batch.logits_indices.size(), size_t(1 + right + wrong)) << "a logits row per verified position";
    const int32_t emitted = right + 1;
    EXPECT_EQ(a->num_tokens(), before_tokens + emitted);
    EXPECT_EQ(a->num_computed_tokens(), a->num_tokens() - 1) << "the rejected drafts' KV is rolled back";
    // Blocks past the one holding the last computed token went back to the pool.
    EXPECT_EQ(int32_t(sim.sched.kv_cache().block_ids("A").size()),
              KvCacheManager::blocks_for_tokens(a->num_computed_tokens(), kBs));
  }
  expect_model_outputs(*a);
  // Plain decoding afterwards reads the KV the rollback kept (the fake runner checks each read).
  for (int i = 0; i < 5; ++i) sim.step();
  expect_model_outputs(*a);
}

TEST(SchedulerSpec, DraftsStayWithinMaxTokensTheContextAndTheBudget) {
  SchedulerConfig c = config();
  c.max_num_batched_tokens = 8;
  c.enable_chunked_prefill = true;
  SpecSim sim(c);
  auto a = std::make_shared<Request>("A", prompt_of(100, 4), 5);
  sim.sched.add_request(a);
  sim.step();
  a->set_spec_token_ids(drafts_for(*a, 10, 0));
  SchedulerOutput out = sim.step();
  // 4 tokens may still come (max_tokens 5, one out): the last token + 3 drafts.
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 4);
  EXPECT_TRUE(a->finished());
  EXPECT_EQ(sim.updates[0].new_token_ids.size(), 4u);
  EXPECT_EQ(sim.updates[0].status, RequestStatus::FinishedLength);

  auto b = std::make_shared<Request>("B", prompt_of(200, 4), 50);
  sim.sched.add_request(b);
  sim.step();
  b->set_spec_token_ids(drafts_for(*b, 20, 0));
  out = sim.step();
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 8) << "the token budget counts the drafts";
  EXPECT_EQ(b->num_output_tokens(), 1 + 8);
  expect_model_outputs(*b);
}

TEST(SchedulerSpec, PrefixCacheKeepsOnlyVerifiedBlocks) {
  SchedulerConfig c = config();
  c.enable_prefix_caching = true;
  SpecSim sim(c);
  auto a = std::make_shared<Request>("A", prompt_of(100, 5), 30);
  sim.sched.add_request(a);
  sim.step();
  for (int i = 0; i < 6; ++i) {
    a->set_spec_token_ids(drafts_for(*a, i % 3, 9));  // wrong drafts fill whole blocks with junk KV
    sim.step();
  }
  expect_model_outputs(*a);
  std::vector<int32_t> tokens(a->all_token_ids().begin(), a->all_token_ids().end());
  ASSERT_TRUE(sim.sched.finish_request("A", RequestStatus::FinishedAborted));
  // B's prompt is A's whole sequence plus more: it reads A's cached blocks, and the fake runner
  // fails the test if any holds a rejected draft.
  tokens.push_back(5);
  tokens.push_back(6);
  auto b = std::make_shared<Request>("B", tokens, 2);
  sim.sched.add_request(b);
  SchedulerOutput out = sim.step();
  EXPECT_GT(b->num_cached_tokens(), 0);
  EXPECT_LT(out.scheduled[0].num_scheduled_tokens, int32_t(tokens.size()));
  sim.step();
}

TEST(SchedulerSpec, DraftsAreDroppedForPromptsAndWhenBlocksRunShort) {
  SchedulerConfig c = config();
  c.num_gpu_blocks = 4;  // 32 tokens
  SpecSim sim(c);
  auto a = std::make_shared<Request>("A", prompt_of(100, 8), 16);
  auto b = std::make_shared<Request>("B", prompt_of(200, 8), 8);
  a->set_spec_token_ids({1, 2, 3});
  sim.sched.add_request(a);
  sim.sched.add_request(b);
  SchedulerOutput out = sim.step();
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 8) << "no drafts with a prompt";
  EXPECT_TRUE(out.scheduled[0].spec_token_ids.empty());
  // A's last token and 9 drafts would take both free blocks and leave none for B's decode: A
  // decodes plainly instead of making B wait.
  a->set_spec_token_ids(drafts_for(*a, 9, 0));
  out = sim.step();
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 1);
  EXPECT_EQ(out.scheduled[1].num_scheduled_tokens, 1);
  EXPECT_EQ(sim.sched.stats().num_preemptions, 0);
  expect_model_outputs(*a);
  expect_model_outputs(*b);
}

TEST(SchedulerSpec, LookaheadSlotsAreReservedForTheVerifiedPositionsAndReturned) {
  SchedulerConfig c = config();
  c.num_lookahead_slots = 12;
  SpecSim sim(c);
  auto a = std::make_shared<Request>("A", prompt_of(100, 6), 40);
  sim.sched.add_request(a);
  sim.step();
  ASSERT_EQ(a->num_tokens(), 7);
  // 2 drafts: the last token and 12 slots after it are reserved (positions 6..18: 3 blocks of 8),
  // though the drafts fill only 2 of them.
  a->set_spec_token_ids(drafts_for(*a, 1, 1));
  SchedulerOutput out = sim.sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 3);
  EXPECT_EQ(int32_t(sim.sched.kv_cache().block_ids("A").size()), KvCacheManager::blocks_for_tokens(6 + 1 + 12, kBs));
  sim.updates = sim.sched.update_from_output(out, sim.runner.execute(out));
  // One draft kept: the slots past the last computed token go back.
  EXPECT_EQ(a->num_tokens(), 9);
  EXPECT_EQ(int32_t(sim.sched.kv_cache().block_ids("A").size()),
            KvCacheManager::blocks_for_tokens(a->num_computed_tokens(), kBs));
  // More drafts than slots: the decode verifies as many as it has slots for.
  a->set_spec_token_ids(drafts_for(*a, 20, 0));
  out = sim.step();
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 1 + 12);
  EXPECT_EQ(a->num_output_tokens(), 3 + 13);
  expect_model_outputs(*a);
  // Without lookahead slots (no speculation) drafts are not scheduled at all.
  SchedulerConfig none = config();
  none.num_lookahead_slots = 0;
  SpecSim plain(none);
  auto b = std::make_shared<Request>("B", prompt_of(200, 6), 40);
  plain.sched.add_request(b);
  plain.step();
  b->set_spec_token_ids(drafts_for(*b, 3, 0));
  EXPECT_EQ(plain.step().scheduled[0].num_scheduled_tokens, 1);
}

TEST(SchedulerSpec, LookaheadSlotsThatDoNotFitMeanAPlainDecode) {
  // 4 blocks (32 tokens): A's last token at position 8 and 30 slots after it would need a fifth
  // block; A decodes plainly rather than preempt or fail.
  SchedulerConfig c = config();
  c.num_gpu_blocks = 4;
  c.num_lookahead_slots = 30;
  SpecSim sim(c);
  auto a = std::make_shared<Request>("A", prompt_of(100, 8), 20);
  sim.sched.add_request(a);
  sim.step();
  a->set_spec_token_ids(drafts_for(*a, 2, 0));
  SchedulerOutput out = sim.step();
  EXPECT_EQ(out.scheduled[0].num_scheduled_tokens, 1);
  EXPECT_EQ(sim.sched.stats().num_preemptions, 0);
  // With 16 slots it fits (positions 8..24: 4 blocks).
  SchedulerConfig d = c;
  d.num_lookahead_slots = 16;
  SpecSim fits(d);
  auto b = std::make_shared<Request>("B", prompt_of(200, 8), 20);
  fits.sched.add_request(b);
  fits.step();
  b->set_spec_token_ids(drafts_for(*b, 2, 0));
  EXPECT_EQ(fits.step().scheduled[0].num_scheduled_tokens, 3);
  expect_model_outputs(*b);
}

}  // namespace
}  // namespace cypris
