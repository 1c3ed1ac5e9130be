// The UI queue (worker -> UI thread hand-off) and the background jobs (stop flag, errors reported,
// never thrown across threads).
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "app/ui/state/background_jobs.h"
#include "app/ui/state/ui_queue.h"

namespace cypris {
namespace {

TEST(UiQueue, RunsTasksInOrderAndLeavesNewOnesForTheNextFrame) {
  UiQueue q;
  std::vector<int> ran;
  q.post([&] { ran.push_back(1); });
  q.post([&] {
    ran.push_back(2);
    q.post([&] { ran.push_back(3); });  // posted while draining
  });
  EXPECT_EQ(q.drain(), 2u);
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(q.pending(), 1u);
  q.drain();
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
}

TEST(UiQueue, WakesTheLoopOnEveryPost) {
  UiQueue q;
  std::atomic<int> wakes{0};
  q.set_wake([&] { ++wakes; });
  q.post([] {});
  q.post([] {});
  EXPECT_EQ(wakes.load(), 2);
}

TEST(BackgroundJobs, ErrorsAreReportedNotThrown) {
  std::vector<std::string> errors;
  std::mutex mu;
  {
    BackgroundJobs jobs([&](const std::string& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(e);
    });
    jobs.run("download", [](const std::atomic<bool>&) { throw std::runtime_error("disk full"); });
    jobs.shutdown();
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "download: disk full");
}

TEST(BackgroundJobs, ShutdownStopsLongJobs) {
  BackgroundJobs jobs;
  std::atomic<bool> saw_stop{false};
  jobs.run("loop", [&](const std::atomic<bool>& stop) {
    while (!stop) std::this_thread::yield();
    saw_stop = true;
  });
  EXPECT_EQ(jobs.running(), 1u);
  jobs.shutdown();  // returns only because the job saw the flag
  EXPECT_TRUE(saw_stop);
  EXPECT_EQ(jobs.running(), 0u);
  jobs.run("late", [&](const std::atomic<bool>&) { saw_stop = false; });  // ignored after shutdown
  EXPECT_TRUE(saw_stop);
}

}  // namespace
}  // namespace cypris
