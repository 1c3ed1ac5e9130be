// --context-shift across requests in the scheduler: a chat turn re-sent with its oldest messages
// dropped takes the finished turn's KV (the system prompt where it was, the later messages and the
// reply moved down) and computes only the rest. The fake runner checks every step that each request
// reads its own tokens at their positions through its block table, and that every move reads the
// token it claims; a batch-mate sharing the finished turn's blocks keeps reading them intact.
#include <gtest/gtest.h>

#include "engine/scheduler/scheduler.h"
#include "tests/support/token_runs.h"
#include "tests/unit/scheduler/sim.h"

namespace cypris {
namespace {

using test::cat;
using test::seq;

struct Chat {
  explicit Chat(const SchedulerConfig& c) : sched(c), runner(c) {}
  std::shared_ptr<Request> add(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
    auto r = std::make_shared<Request>(id, std::move(prompt), max_tokens);
    sched.add_request(r);
    return r;
  }
  // Runs until nothing is left; returns the tokens scheduled over all steps.
  int64_t run() {
    int64_t scheduled = 0;
    for (int steps = 0; sched.has_unfinished_requests() && steps < 1000; ++steps) {
      SchedulerOutput out = sched.schedule();
      testing::check_invariants(sched, out);
      for (const auto& r : out.context_reuses) reuses.push_back(r);
      scheduled += out.total_num_scheduled_tokens;
      auto results = runner.execute(out);
      sched.update_from_output(out, results);
    }
    return scheduled;
  }
  Scheduler sched;
  testing::FakeRunner runner;
  std::vector<ContextReuse> reuses;
};

SchedulerConfig chat_config(bool prefix_caching, bool chunked) {
  SchedulerConfig c;
  c.max_num_batched_tokens = chunked ? 16 : 256;
  c.max_num_seqs = 8;
  c.max_model_len = 128;
  c.block_size = 8;
  c.num_gpu_blocks = 96;
  c.enable_prefix_caching = prefix_caching;
  c.enable_chunked_prefill = chunked;
  c.context_shift = true;
  c.context_shift_rotate = true;
  return c;
}

const std::vector<int32_t> kSystem = seq(1, 6), kOld = seq(100, 20), kKept = seq(200, 30), kNew = seq(300, 5);

TEST(SchedulerContextReuse, ATrimmedChatComputesOnlyItsNewTokens) {
  struct Mode {
    const char* name;
    bool prefix_caching, chunked;
  };
  for (const Mode& m : {Mode{"plain", false, false}, Mode{"prefix caching", true, false},
                        Mode{"prefix caching + chunked prefill", true, true}}) {
    SCOPED_TRACE(m.name);
    Chat chat(chat_config(m.prefix_caching, m.chunked));
    auto t1 = chat.add("t1", cat({kSystem, kOld, kKept}), 10);
    chat.run();
    ASSERT_EQ(t1->status(), RequestStatus::FinishedLength);
    const std::vector<int32_t> reply(t1->output_token_ids().begin(), t1->output_token_ids().end());
    // The next turn: the oldest message dropped, the reply and a new message added. Batched with a
    // request that repeats turn 1's prompt (sharing its cached blocks with prefix caching) and one
    // whose messages are not in the cache at all.
    auto t2 = chat.add("t2", cat({kSystem, kKept, reply, kNew}), 10);
    auto again = chat.add("again", cat({kSystem, kOld, kKept}), 10);
    auto other = chat.add("other", cat({kSystem, seq(500, 40)}), 10);
    const int64_t scheduled = chat.run();
    for (const auto& r : {t2, again, other}) EXPECT_EQ(r->status(), RequestStatus::FinishedLength) << r->request_id();
    // t2: the system prompt in place, the kept message and 9 reply tokens (the 10th has no KV)
    // moved down by the dropped message's 20 tokens; 5 new tokens computed.
    const ContextReuse* got = nullptr;
    for (const auto& r : chat.reuses)
      if (r.request_id == "t2") got = &r;
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->cached + got->same, 6);
    EXPECT_EQ(got->moved, 30 + 9);
    EXPECT_EQ(got->distance, 20);
    EXPECT_EQ(got->computed, 1 + 5);  // the last reply token and the new message
    // 'again' repeats turn 1 exactly: all but its last token reused in place (from the prefix cache
    // or the finished sequence); 'other' shares only the system prompt.
    for (const auto& r : chat.reuses) {
      if (r.request_id == "again") EXPECT_EQ(r.moved, 0);
      if (r.request_id == "other") EXPECT_EQ(r.cached + r.same + r.moved, 6);
    }
    // Computed: t2's 6, again's last token, other's 40 new tokens; then 9 decode steps each.
    EXPECT_EQ(scheduled, 6 + 1 + 40 + 3 * 9);
    EXPECT_EQ(chat.sched.stats().num_context_reuse_moved, 39);
  }
}

TEST(SchedulerContextReuse, NothingIsReusedWithoutRotationOrAMatchingStretch) {
  // Recompute mode (or a model whose keys cannot rotate): the next turn computes everything.
  SchedulerConfig c = chat_config(false, false);
  c.context_shift_rotate = false;
  Chat chat(c);
  auto t1 = chat.add("t1", cat({kSystem, kOld, kKept}), 10);
  chat.run();
  const std::vector<int32_t> reply(t1->output_token_ids().begin(), t1->output_token_ids().end());
  chat.add("t2", cat({kSystem, kKept, reply, kNew}), 10);
  EXPECT_EQ(chat.run(), 6 + 30 + 10 + 5 + 9);
  EXPECT_EQ(chat.sched.stats().num_context_reuses, 0);
  // Rotation on, but the new turn's messages are not a stretch of the finished one.
  Chat rotating(chat_config(false, false));
  rotating.add("t1", cat({kSystem, kOld, kKept}), 10);
  rotating.run();
  rotating.add("t2", cat({kSystem, seq(700, 30), kNew}), 10);
  EXPECT_EQ(rotating.run(), 35 + 9);
  EXPECT_EQ(rotating.sched.stats().num_context_reuse_moved, 0);
  EXPECT_EQ(rotating.sched.stats().num_context_reuse_tokens, 6);  // the system prompt, in place
}

}  // namespace
}  // namespace cypris
