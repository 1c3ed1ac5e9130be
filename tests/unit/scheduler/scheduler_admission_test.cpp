// Scheduler::set_admission_check (the engine's LoRA slots): a waiting request the check refuses
// keeps its place while the ones after it are admitted, and runs once the check lets it; a swapped
// request the check refuses stays swapped; without a check nothing changes.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "engine/scheduler/scheduler.h"
#include "tests/unit/scheduler/sim.h"

namespace cypris {
namespace {

SchedulerConfig config() {
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.max_model_len = 64;
  c.block_size = 8;
  c.num_gpu_blocks = 64;
  return c;
}

std::shared_ptr<Request> make(const std::string& id, int32_t prompt_len, int32_t max_tokens) {
  std::vector<int32_t> t(static_cast<size_t>(prompt_len));
  std::iota(t.begin(), t.end(), 100);
  return std::make_shared<Request>(id, std::move(t), max_tokens, nullptr, 0, 0.0);
}

std::set<std::string> scheduled_ids(const SchedulerOutput& out) {
  std::set<std::string> ids;
  for (const auto& s : out.scheduled) ids.insert(s.request->request_id());
  return ids;
}

TEST(SchedulerAdmission, ARefusedRequestKeepsItsPlaceAndTheNextOnesRun) {
  Scheduler sched(config(), [] { return 0.0; });
  testing::FakeRunner runner(config());
  std::set<std::string> refused = {"b"};
  std::vector<std::string> asked;
  sched.set_admission_check([&](Request& r) {
    asked.push_back(r.request_id());
    return refused.count(r.request_id()) == 0;
  });
  for (const char* id : {"a", "b", "c"}) sched.add_request(make(id, 4, 3));
  SchedulerOutput out = sched.schedule();
  testing::check_invariants(sched, out);
  EXPECT_EQ(scheduled_ids(out), (std::set<std::string>{"a", "c"}));
  EXPECT_EQ(asked, (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(sched.waiting().size(), 1u);
  EXPECT_EQ(sched.waiting().front()->request_id(), "b");
  sched.update_from_output(out, runner.execute(out));

  // Running requests are not asked again; b is, and runs once allowed.
  asked.clear();
  refused.clear();
  out = sched.schedule();
  testing::check_invariants(sched, out);
  EXPECT_EQ(asked, std::vector<std::string>{"b"});
  EXPECT_EQ(scheduled_ids(out), (std::set<std::string>{"a", "b", "c"}));
  sched.update_from_output(out, runner.execute(out));
  while (sched.has_unfinished_requests()) {
    out = sched.schedule();
    ASSERT_FALSE(out.empty());
    sched.update_from_output(out, runner.execute(out));
  }
}

TEST(SchedulerAdmission, ARequestRefusedForeverNeverRunsAndOthersFinish) {
  Scheduler sched(config(), [] { return 0.0; });
  testing::FakeRunner runner(config());
  sched.set_admission_check([](Request& r) { return r.request_id() != "stuck"; });
  sched.add_request(make("stuck", 4, 2));
  sched.add_request(make("x", 4, 2));
  for (int step = 0; step < 6; ++step) {
    SchedulerOutput out = sched.schedule();
    EXPECT_EQ(scheduled_ids(out).count("stuck"), 0u);
    sched.update_from_output(out, runner.execute(out));
  }
  EXPECT_EQ(sched.num_unfinished_requests(), 1);
  EXPECT_EQ(sched.waiting().front()->request_id(), "stuck");
}

TEST(SchedulerAdmission, ASwappedRequestTheCheckRefusesStaysSwapped) {
  SchedulerConfig c = config();
  c.num_gpu_blocks = 3;  // two 8-token requests growing past one block each cannot both stay
  c.num_cpu_blocks = 8;
  c.preemption_mode = PreemptionMode::Swap;
  Scheduler sched(c, [] { return 0.0; });
  testing::FakeRunner runner(c);
  bool allow = true;
  sched.set_admission_check([&](Request& r) { return allow || r.request_id() != "b"; });
  sched.add_request(make("a", 8, 12));
  sched.add_request(make("b", 8, 12));
  bool swapped = false;
  for (int step = 0; step < 40 && sched.has_unfinished_requests(); ++step) {
    SchedulerOutput out = sched.schedule();
    testing::check_invariants(sched, out);
    if (!sched.swapped().empty() && sched.swapped().front()->request_id() == "b") {
      swapped = true;
      allow = false;
    }
    if (!allow) EXPECT_TRUE(out.swapped_in_ids.empty());
    sched.update_from_output(out, runner.execute(out));
    if (swapped && sched.running().empty()) break;
  }
  ASSERT_TRUE(swapped) << "the set-up should swap b out";
  EXPECT_EQ(sched.swapped().size(), 1u);
  allow = true;
  while (sched.has_unfinished_requests()) {
    SchedulerOutput out = sched.schedule();
    ASSERT_FALSE(out.empty());
    sched.update_from_output(out, runner.execute(out));
  }
}

}  // namespace
}  // namespace cypris
